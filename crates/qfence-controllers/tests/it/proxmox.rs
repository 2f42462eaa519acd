//! The Proxmox VE driver against fakepve (an independent PVE API emulator), started per test
//! by `tools/emulators/start-pve-fakepve.sh` on ports and in a run dir of the test's own, with
//! its control port for offline nodes, quorum loss, latency and injected failures.
//!
//! fakepve's replication endpoints are static (no `last_sync`/`fail_count`): against it the
//! tests only show that such an answer is refused as a protocol error, never read as "fresh".
//! Parsing of real PVE replication status and the cache used once the source node is gone
//! are unit tests in `src/proxmox/mod.rs`.
//!
//! Without the emulator these tests fail with a message saying so, unless
//! `QFENCE_SKIP_EMULATORS=1`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::emulators::{Emulator, Starter};

use qfence_controllers::driver::Build as _;
use qfence_controllers::proxmox::{self, ProxmoxDriver};
use qfence_controllers::{CallContext, Driver, ErrorKind, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, ProxmoxAuth, TlsTrust};
use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId, Verdict};
use secrecy::SecretString;
use serde_json::Value;

const TOKEN_ID: &str = "root@pam!qfence";
const TOKEN_SECRET: &str = "11111111-2222-3333-4444-555555555555";

/// A fakepve instance of the test's own; stopped when dropped.
#[derive(Debug)]
struct Pve {
    _emu: Emulator,
    /// The test's own scenario file, kept while fakepve runs.
    _scenario: Option<tempfile::NamedTempFile>,
    url: String,
    control: String,
    cacert: String,
    http: reqwest::Client,
}

impl Pve {
    fn start(time_scale: &str) -> Option<Pve> {
        Self::start_with(time_scale, None)
    }

    /// Starts fakepve with a scenario of the test's own (`fakepve_harness.py`'s format)
    /// instead of the start script's default.
    fn start_with(time_scale: &str, scenario: Option<&Value>) -> Option<Pve> {
        let scenario = scenario.map(|sc| {
            let f = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(f.path(), sc.to_string()).unwrap();
            f
        });
        let mut starter = Starter::new("start-pve-fakepve.sh")
            .prefix("qpve")
            .venv("fakepve")
            .tcp_port("PVE_PORT")
            .tcp_port("PVE_CTL_PORT")
            .env("PVE_TIME_SCALE", time_scale);
        if let Some(f) = &scenario {
            starter = starter.env("PVE_SCENARIO", f.path().display().to_string());
        }
        let emu = starter.start()?;
        Some(Pve {
            url: format!("https://127.0.0.1:{}", emu.port("PVE_PORT")),
            control: emu.var("PVE_CONTROL").to_owned(),
            cacert: emu.var("PVE_CACERT").to_owned(),
            _emu: emu,
            _scenario: scenario,
            http: {
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            },
        })
    }

    /// A control-port call (`/node/pve2/offline`, `/fail?...`).
    async fn ctl(&self, path: &str) -> Value {
        let resp = self
            .http
            .post(format!("{}{path}", self.control))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.unwrap_or(Value::Null)
    }

    async fn state(&self) -> Value {
        self.http
            .get(format!("{}/state", self.control))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn vm_status(&self, vmid: u64) -> String {
        let s = self.state().await;
        let vm = s["vms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["vmid"] == vmid)
            .unwrap()
            .clone();
        vm["status"].as_str().unwrap().to_owned()
    }

    /// How many requests matched `method` and a path ending in `suffix`.
    async fn requests(&self, method: &str, suffix: &str) -> usize {
        let r: Value = self
            .http
            .get(format!("{}/requests", self.control))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r.as_array()
            .unwrap()
            .iter()
            .filter(|e| e[0] == method && e[1].as_str().unwrap_or("").ends_with(suffix))
            .count()
    }

    fn driver_with(&self, auth: ProxmoxAuth, secret: &str) -> ProxmoxDriver {
        let config = ControllerConfig {
            site: SiteId::new("dc1").unwrap(),
            reach: vec![],
            secret: None,
            tls: TlsTrust::CaFile(self.cacert.clone()),
            timeout: Duration::from_secs(5),
            kind: ControllerKind::Proxmox {
                endpoint: self.url.parse().unwrap(),
                auth,
            },
        };
        proxmox::ProxmoxDriver::build(
            ControllerId::new("pve").unwrap(),
            &config,
            Some(SecretString::from(secret.to_owned())),
        )
        .unwrap()
    }

    fn driver(&self) -> ProxmoxDriver {
        self.driver_with(
            ProxmoxAuth::Token {
                token_id: TOKEN_ID.to_owned(),
            },
            TOKEN_SECRET,
        )
    }
}

fn ctx() -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("orc-dc1").unwrap(),
        Duration::from_secs(20),
    )
}

fn target(cap: &str, resource: &str) -> Target {
    Target {
        capability: cap.to_owned(),
        resource: resource.to_owned(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    }
}

#[tokio::test]
async fn probe_reads_the_cluster_and_proves_the_token_privileges() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let p = pve.driver().probe(&ctx()).await.unwrap();
    assert_eq!(p.identity.id, "qfence");
    assert_eq!(p.identity.facts["node.pve2"], "online");
    assert_eq!(p.identity.facts["quorate"], "true");
    let fp = p.identity.tls_fingerprint.clone().unwrap_or_default();
    assert!(
        fp.starts_with("sha256:") && fp.len() == "sha256:".len() + 64,
        "{fp:?}"
    );
    assert_eq!(p.grades.len(), 4);
    assert!(p.grades.iter().all(|g| g.grade == Grade::Proven), "{p:?}");
    assert_eq!(pve.requests("POST", "").await, 0, "a probe sends no POST");

    pve.ctl("/node/pve3/offline").await;
    pve.ctl("/quorum/lose").await;
    let p = pve.driver().probe(&ctx()).await.unwrap();
    assert_eq!(p.identity.facts["node.pve3"], "offline");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("node pve3 is offline")),
        "{:?}",
        p.warnings
    );
    assert!(
        p.warnings.iter().any(|w| w.contains("no quorum")),
        "{:?}",
        p.warnings
    );
}

#[tokio::test]
async fn vm_stop_follows_the_task_reads_back_and_is_idempotent() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver();
    let t = target("vm.stop", "pve1/100");
    assert_eq!(
        d.check(&ctx(), &t).await.unwrap().verdict(),
        Verdict::Failed
    );

    let r = d.perform(&ctx(), &t).await.unwrap();
    assert!(r.holds && r.detail.contains("status=stopped"), "{r:?}");
    assert_eq!(pve.vm_status(100).await, "stopped");
    assert_eq!(pve.requests("POST", "/qemu/100/status/stop").await, 1);
    assert!(pve.requests("GET", "/tasks/").await + pve.requests("GET", "/status").await > 0);

    // Already stopped: success without another stop.
    assert!(d.perform(&ctx(), &t).await.unwrap().holds);
    assert_eq!(pve.requests("POST", "/qemu/100/status/stop").await, 1);

    let u = d.undo(&ctx(), &t).await.unwrap();
    assert!(!u.holds && u.detail.contains("status=running"), "{u:?}");
    assert_eq!(pve.vm_status(100).await, "running");
    assert!(
        d.check(&ctx(), &target("vm.status", "pve1/100"))
            .await
            .unwrap()
            .holds
    );
}

#[tokio::test]
async fn an_ha_managed_vm_is_stopped_through_the_ha_stack_and_proven_by_status() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver();
    let r = d
        .perform(&ctx(), &target("vm.stop", "pve2/102"))
        .await
        .unwrap();
    assert!(r.holds, "{r:?}");
    assert!(r.detail.contains("HA"), "{}", r.detail);
    assert_eq!(pve.vm_status(102).await, "stopped");
    // overrule-shutdown is not sent for HA resources (PVE rejects it there).
    let s = d
        .perform(&ctx(), &target("vm.start", "pve2/102"))
        .await
        .unwrap();
    assert!(s.holds, "{s:?}");
}

#[tokio::test]
async fn an_offline_node_or_lost_quorum_never_reads_as_fenced() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver();
    let t = target("vm.stop", "pve2/101");
    pve.ctl("/node/pve2/offline").await;
    let r = d.check(&ctx(), &t).await;
    assert_eq!(
        r.as_ref().unwrap_err().kind,
        ErrorKind::Unreachable,
        "{r:?}"
    );
    assert_eq!(
        qfence_controllers::driver::fence_verdict(&r),
        Verdict::Unknown
    );
    let e = d.perform(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    let p = d.check_binding(&ctx(), &t).await.unwrap();
    assert!(p.iter().any(|p| p.contains("offline")), "{p:?}");
    pve.ctl("/node/pve2/online").await;

    pve.ctl("/quorum/lose").await;
    let e = d.perform(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.message.contains("quorum"), "{e}");
    assert_eq!(pve.vm_status(101).await, "running");
    let p = d.check_binding(&ctx(), &t).await.unwrap();
    assert!(p.iter().any(|p| p.contains("quorum")), "{p:?}");
}

#[tokio::test]
async fn failures_and_wrong_bindings_are_errors_not_fences() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver();
    let t = target("vm.stop", "pve1/100");
    pve.ctl("/fail?method=POST&suffix=/status/stop&status=500&message=boom&times=1")
        .await;
    let e = d.perform(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(e.message.contains("boom"), "{e}");
    assert!(
        e.state_unknown,
        "after a 5xx on a stop, read back before relying on it"
    );
    assert_eq!(pve.vm_status(100).await, "running");

    // The binding names the wrong node: caught at binding time, and a fence there fails.
    let wrong = target("vm.stop", "pve1/101");
    let p = d.check_binding(&ctx(), &wrong).await.unwrap();
    assert!(
        p.iter()
            .any(|p| p.contains("VM 101 is on node pve2, not pve1")),
        "{p:?}"
    );
    let e = d.perform(&ctx(), &wrong).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.message.contains("does not exist"), "{e}");
    assert!(
        d.check_binding(&ctx(), &target("vm.stop", "pve2/101"))
            .await
            .unwrap()
            .is_empty()
    );
    // It moves: the binding check sees it.
    pve.ctl("/vm/101/set?node=pve3").await;
    let p = d
        .check_binding(&ctx(), &target("vm.stop", "pve2/101"))
        .await
        .unwrap();
    assert!(p.iter().any(|p| p.contains("on node pve3")), "{p:?}");

    let bad = pve.driver_with(
        ProxmoxAuth::Token {
            token_id: TOKEN_ID.to_owned(),
        },
        "00000000-dead",
    );
    let e = bad.check(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(
        !e.to_string().contains("00000000-dead"),
        "never echo the secret: {e}"
    );

    let e = d.renew(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

#[tokio::test]
async fn deadlines_hold_against_a_slow_api() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    // PVE seconds, scaled by the time scale 0.02: 2 s real.
    pve.ctl("/network?latency=100").await;
    let c = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(300),
    );
    let start = std::time::Instant::now();
    let e = pve
        .driver()
        .perform(&c, &target("vm.stop", "pve1/100"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.state_unknown);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn ticket_auth_logs_in_and_again_after_revocation() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver_with(
        ProxmoxAuth::Ticket {
            username: "root@pam".to_owned(),
        },
        "secret",
    );
    let t = target("vm.stop", "pve3/103");
    assert!(d.check(&ctx(), &t).await.unwrap().holds);
    // Writes carry the CSRF token.
    assert!(!d.undo(&ctx(), &t).await.unwrap().holds);
    pve.ctl("/tickets/revoke").await;
    assert!(d.perform(&ctx(), &t).await.unwrap().holds);
    assert_eq!(pve.requests("POST", "/access/ticket").await, 2);
    let p = d.probe(&ctx()).await.unwrap();
    assert!(p.grades.iter().all(|g| g.grade == Grade::Proven), "{p:?}");

    let bad = pve.driver_with(
        ProxmoxAuth::Ticket {
            username: "root@pam".to_owned(),
        },
        "wrong",
    );
    assert_eq!(
        bad.check(&ctx(), &t).await.unwrap_err().kind,
        ErrorKind::Auth
    );
}

#[tokio::test]
async fn discovery_and_replication_against_fakepve() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let d = pve.driver();
    let found = d.discover(&ctx()).await.unwrap();
    let has = |cap: &str, res: &str| {
        found
            .iter()
            .any(|f| f.capability == cap && f.resource == res)
    };
    assert!(
        has("vm.stop", "pve1/100") && has("vm.start", "pve3/103") && has("vm.status", "pve2/102"),
        "{found:?}"
    );
    assert!(has("replication.lag", "100-0"), "{found:?}");
    assert!(
        found.iter().any(|f| f.description.contains("\"db1\"")),
        "{found:?}"
    );

    // fakepve's replication status is a static `{}`: refused, never "fresh".
    let r = d.check(&ctx(), &target("replication.lag", "100-0")).await;
    let e = r.as_ref().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
    assert!(e.message.contains("last_sync"), "{e}");
    assert!(
        d.check_binding(&ctx(), &target("replication.lag", "100-0"))
            .await
            .unwrap()
            .is_empty()
    );
    let p = d
        .check_binding(&ctx(), &target("replication.lag", "100-7"))
        .await
        .unwrap();
    assert!(p[0].contains("does not exist"), "{p:?}");
    // With the source node gone and nothing cached, the answer is unknown.
    pve.ctl("/node/pve1/offline").await;
    let r = d.check(&ctx(), &target("replication.lag", "100-0")).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Unreachable);
}

#[tokio::test]
async fn proxmox_passes_the_compliance_suite_against_fakepve() {
    let Some(pve) = Pve::start("0.02") else {
        return;
    };
    let case = crate::compliance::Case {
        driver: pve.driver(),
        fence: crate::compliance::target("vm.stop", "pve1/100"),
        missing: Some(crate::compliance::target("vm.stop", "pve1/999")),
        action_timeout: Duration::from_secs(20),
        slow_fence: false,
    };
    crate::compliance::run(case).await;
    assert_eq!(
        pve.vm_status(100).await,
        "running",
        "the suite ends unfenced"
    );
}

/// A scenario where `fence@pve` may power-manage and audit every VM, and its token
/// `fence@pve!qfence` has privilege separation with `token_acl` as its own ACL.
fn privsep_scenario(token_acl: Value) -> Value {
    let mut acl = vec![serde_json::json!(
        {"user": "fence@pve", "path": "/vms", "privs": ["VM.PowerMgmt", "VM.Audit"]}
    )];
    acl.extend(token_acl.as_array().cloned().unwrap_or_default());
    serde_json::json!({
        "cluster_name": "qfence",
        "nodes": {"pve1": true, "pve2": true},
        "users": {"fence@pve": "fencepass"},
        "tokens": {"fence@pve!qfence": TOKEN_SECRET},
        "guests": [
            {"vmid": 100, "name": "db1", "node": "pve1", "status": "running", "config": {}},
            {"vmid": 101, "name": "db2", "node": "pve2", "status": "running", "config": {}}
        ],
        "acl": acl,
        "privsep": ["fence@pve!qfence"]
    })
}

fn privsep_driver(pve: &Pve) -> ProxmoxDriver {
    pve.driver_with(
        ProxmoxAuth::Token {
            token_id: "fence@pve!qfence".to_owned(),
        },
        TOKEN_SECRET,
    )
}

fn grade_of(p: &qfence_controllers::Probe, cap: &str) -> (Grade, String) {
    let g = p.grades.iter().find(|g| g.capability == cap).unwrap();
    (g.grade, g.reason.clone())
}

#[tokio::test]
async fn a_privsep_token_with_its_own_acl_is_proven_and_fences() {
    let scenario = privsep_scenario(serde_json::json!([
        {"user": "fence@pve!qfence", "path": "/vms", "privs": ["VM.PowerMgmt", "VM.Audit"]}
    ]));
    let Some(pve) = Pve::start_with("0.02", Some(&scenario)) else {
        return;
    };
    let d = privsep_driver(&pve);
    let p = d.probe(&ctx()).await.unwrap();
    for cap in ["vm.stop", "vm.start", "vm.status", "replication.lag"] {
        let (grade, reason) = grade_of(&p, cap);
        assert_eq!(grade, Grade::Proven, "{cap}: {reason}");
    }
    let t = target("vm.stop", "pve2/101");
    assert!(d.check_binding(&ctx(), &t).await.unwrap().is_empty());
    assert!(d.perform(&ctx(), &t).await.unwrap().holds);
    assert_eq!(pve.vm_status(101).await, "stopped");
}

#[tokio::test]
async fn a_privsep_token_without_its_own_acl_fails_grading_and_cannot_fence() {
    // The token's own ACL grants only VM.Audit on VM 100: with privilege separation it holds
    // no VM.PowerMgmt anywhere, although its user does.
    let scenario = privsep_scenario(serde_json::json!([
        {"user": "fence@pve!qfence", "path": "/vms/100", "privs": ["VM.Audit"]}
    ]));
    let Some(pve) = Pve::start_with("0.02", Some(&scenario)) else {
        return;
    };
    let d = privsep_driver(&pve);
    let p = d.probe(&ctx()).await.unwrap();
    let (grade, reason) = grade_of(&p, "vm.stop");
    assert_eq!(grade, Grade::Failed, "{reason}");
    assert!(reason.contains("privilege separation"), "{reason}");
    let (grade, reason) = grade_of(&p, "vm.status");
    assert_eq!(grade, Grade::Inferred, "{reason}");
    assert!(reason.contains("only on VMs 100"), "{reason}");
    assert_eq!(pve.requests("POST", "").await, 0, "a probe sends no POST");

    let t = target("vm.stop", "pve1/100");
    let problems = d.check_binding(&ctx(), &t).await.unwrap();
    assert!(
        problems.iter().any(|m| m.contains("VM.PowerMgmt")),
        "{problems:?}"
    );
    let e = d.perform(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(!e.state_unknown, "a refused stop changed nothing: {e}");
    assert_eq!(pve.vm_status(100).await, "running");
}
