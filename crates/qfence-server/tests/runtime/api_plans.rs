//! Plans and controllers managed through the API on running orchestrators (issue 5): created,
//! staged and applied with compare-and-set, deleted, registered; decided by the engine like
//! the file's; seen by every orchestrator and by a new leader; the file's own plans refused.
//! Every call goes through the real router over the runtime backend, validation included.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use qfence_cluster::state::{Command as ClusterCommand, PlanStateDoc, Response};
use qfence_core::{Millis, Observed, Phase, Stage, StoredPlanState, Transition, TransitionKind};
use qfence_model::PlanId;
use qfence_runtime::PLAN_STATE_SCHEMA;
use qfence_runtime::RuntimeBackend;
use qfence_runtime::events::EventKind;
use qfence_runtime::{Access, Metrics, TokenStore};
use qfence_server::ApiConfig;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::lab::{self, Orchestrator, Sims, eventually, phase};

pub(crate) const ADMIN: &str = "admin-token-9";

/// The real router over an orchestrator's runtime backend.
#[derive(Clone)]
pub(crate) struct Http(pub(crate) axum::Router);

impl Http {
    pub(crate) fn over(o: &Orchestrator) -> Self {
        let backend = RuntimeBackend::new(&o.engine, lab::secrets());
        Self(qfence_server::router(
            Arc::new(backend),
            TokenStore::default().with_token(Access::Admin, "alice", ADMIN),
            Metrics::new(),
            &ApiConfig::default(),
        ))
    }

    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let b = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"));
        let req = match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&v).expect("json")))
                .expect("a request"),
            None => b.body(Body::empty()).expect("a request"),
        };
        let resp = self.0.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("a body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub(crate) async fn plan_status(&self, plan: &str) -> Option<Value> {
        let (_, s) = self.get("/api/v1/status").await;
        s["plans"]
            .as_array()?
            .iter()
            .find(|p| p["plan"] == plan)
            .cloned()
    }
}

fn verdict_of(plan: &Value, site: &str) -> Option<String> {
    plan["sites"]
        .as_array()?
        .iter()
        .find(|s| s["site"] == site)
        .and_then(|s| s["verdict"].as_str().map(str::to_owned))
}

/// A plan over the lab's VM 101 without the VIP (erp-db keeps it), on a fast clock, that never
/// fails over on its own: it only checks, so it cannot disturb erp-db.
pub(crate) fn spec(dc2_fence_controller: &str) -> Value {
    let inst = |dc: &str, fence: &str| {
        json!([
            {"controller": fence, "capability": "power.off", "resource": format!("pve-{dc}-01"), "role": "fence", "required": true},
            {"controller": format!("pve-{dc}"), "capability": "vm.status", "resource": format!("pve-{dc}-01/101"), "role": "health"},
            {"controller": format!("pve-{dc}"), "capability": "vm.start", "resource": format!("pve-{dc}-01/101"), "role": "switchover"}
        ])
    };
    json!({
        "owner": "dc1",
        "interval_seconds": 1,
        "fence_timeout_seconds": 3,
        "recovery_after_seconds": 600,
        "failover_after_seconds": 1200,
        "auto_failover": false,
        "instances": {"dc1": inst("dc1", "bmc-dc1"), "dc2": inst("dc2", dc2_fence_controller)}
    })
}

fn messages(o: &Orchestrator) -> Vec<String> {
    o.engine
        .events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Config)
        .map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_and_controllers_are_created_changed_and_deleted_through_the_api() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);
    let web = PlanId::new("web")?;

    phase("create web through the API: 201 at generation 1, source api");
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    assert_eq!(body["generation"], 1);
    assert_eq!(body["source"], "api");
    assert_eq!(body["spec"]["auto_failover"], false);
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict")),
        "{body}"
    );

    phase("the engine decides it: checks run, dc2 reads FENCED, a status is published");
    let status = eventually(Duration::from_secs(20), "web's dc2 FENCED", || async {
        let p = api.plan_status("web").await?;
        (verdict_of(&p, "dc2").as_deref() == Some("FENCED")).then_some(p)
    })
    .await?;
    assert_eq!(status["owner"], "dc1");
    assert!(
        !status["last_reason"].as_str().unwrap_or("").is_empty(),
        "{status}"
    );
    eventually(
        Duration::from_secs(10),
        "web's status published",
        || async { o.node.read(|s| s.statuses.contains_key(&web)).then_some(()) },
    )
    .await?;
    let health = o
        .engine
        .runtime(&web)
        .observations
        .get(&o.key("web", "dc1", 1))
        .map(|o| o.value);
    assert_eq!(health, Some(Observed::Holds), "dc1's VM health was read");

    phase("the file's plan is shown as such and refuses changes and deletion");
    let (_, erp) = api.get("/api/v1/plans/erp-db").await;
    assert_eq!(erp["source"], "file");
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(json!({"spec": spec("bmc-dc2")})),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("plan erp-db comes from the configuration file; change it there"),
        "{body}"
    );
    let (st, body) = api
        .call(
            Method::DELETE,
            "/api/v1/plans/erp-db?expected_generation=1",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("configuration file")
    );
    let (st, _) = api
        .post(
            "/api/v1/plans/erp-db/apply",
            json!({"expected_generation": 1}),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT);
    assert!(
        o.engine.plan_state(&lab::plan())?.is_some(),
        "erp-db is still there"
    );

    phase("stage a change: stored with its base generation, nothing in force");
    let mut changed = spec("bmc-dc2");
    changed["max_retries"] = json!(5);
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": changed})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(body["staged"]["base_generation"], 1);
    assert_eq!(body["staged"]["staged_by"], "alice");
    assert!(body["staged"]["staged_at_ms"].is_u64(), "{body}");
    assert_eq!(body["generation"], 1);
    assert!(
        body["spec"].get("max_retries").is_none(),
        "not in force yet"
    );
    assert_eq!(o.engine.plan_state(&web)?.map(|s| s.generation.0), Some(1));
    assert_eq!(
        o.engine.config().plan("web").map(|p| p.max_retries),
        Some(2)
    );
    let (st, dry) = api
        .post(
            "/api/v1/plans/web/dry-run",
            json!({"action": "apply_staged"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{dry}");
    assert_eq!(dry["refused"], false, "{dry}");

    phase("apply with a stale generation: 409 with the current one, nothing changed");
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 7}))
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "stale_generation");
    assert_eq!(body["current_generation"], 1);
    assert_eq!(
        o.engine.config().plan("web").map(|p| p.max_retries),
        Some(2)
    );

    phase("apply with the right generation: in force, generation 2, still decided");
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(body["generation"], 2);
    assert_eq!(body["spec"]["max_retries"], 5);
    assert!(body["staged"].is_null());
    let state = o.engine.plan_state(&web)?.expect("web is registered");
    assert_eq!((state.generation.0, state.owner.as_str()), (2, "dc1"));
    assert_eq!(
        o.engine.config().plan("web").map(|p| p.max_retries),
        Some(5)
    );
    eventually(
        Duration::from_secs(20),
        "web's dc2 FENCED again",
        || async {
            let p = api.plan_status("web").await?;
            (p["generation"] == 2 && verdict_of(&p, "dc2").as_deref() == Some("FENCED"))
                .then_some(())
        },
    )
    .await?;
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 2}))
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "nothing staged: {body}");

    phase("a change that drops the owner is refused");
    let mut no_owner = spec("bmc-dc2");
    no_owner["owner"] = json!("dc2");
    no_owner["instances"]
        .as_object_mut()
        .expect("instances")
        .remove("dc1");
    // With the lab's two plan sites, a plan without its owner has one site, which does not
    // validate: staging refuses it before apply's owner check could (the double's API tests
    // cover that check).
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": no_owner})),
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed")),
        "{body}"
    );
    assert_eq!(o.engine.plan_state(&web)?.map(|s| s.generation.0), Some(2));

    phase("register a controller, then a plan binding it: its driver is built and called");
    let bmc = json!({"type": "redfish", "endpoint": sims.bmc2.base_url(), "site": "dc2",
        "reach": ["dc1"], "secret": "lab-redfish", "username": "qfence", "timeout_seconds": 2,
        "tls": {"pin": format!("sha256:{}", sims.bmc2.fingerprint())}});
    let (st, body) = api
        .post(
            "/api/v1/controllers",
            json!({"name": "bmc-dc2-api", "spec": bmc}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let (st, _) = api
        .post(
            "/api/v1/controllers",
            json!({"name": "bmc-dc2-api", "spec": bmc}),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT);
    let (_, list) = api.get("/api/v1/controllers").await;
    assert!(
        list.as_array()
            .is_some_and(|l| l.iter().any(|c| c["name"] == "bmc-dc2-api")),
        "{list}"
    );
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web2", "spec": spec("bmc-dc2-api")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let web2 = eventually(
        Duration::from_secs(20),
        "web2's dc2 FENCED through bmc-dc2-api",
        || async {
            let p = api.plan_status("web2").await?;
            (verdict_of(&p, "dc2").as_deref() == Some("FENCED")).then_some(p)
        },
    )
    .await?;
    assert_eq!(web2["generation"], 1);
    assert!(
        o.engine.events().iter().any(|e| e.kind == EventKind::Result
            && e.data["controller"] == "bmc-dc2-api"
            && e.plan.as_deref() == Some("web2")),
        "web2's fence was read through the controller registered a moment ago"
    );
    let (st, test) = api
        .post("/api/v1/controllers/bmc-dc2-api/test", json!({}))
        .await;
    assert_eq!(st, StatusCode::OK, "{test}");
    assert_eq!(test["reachable"], true, "{test}");
    let (_, list) = api.get("/api/v1/controllers").await;
    let listed = list
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == "bmc-dc2-api").cloned())
        .expect("listed");
    assert_eq!(
        listed["grades"], test["grades"],
        "the list shows the last test's grades"
    );
    assert!(listed["tested_at_ms"].is_u64(), "{listed}");
    assert!(
        !listed["grades"].as_array().is_some_and(Vec::is_empty),
        "{listed}"
    );
    let (st, found) = api.get("/api/v1/controllers/bmc-dc2-api/resources").await;
    assert_eq!(st, StatusCode::OK, "{found}");
    assert!(
        found
            .as_array()
            .is_some_and(|l| l.iter().any(|d| d["resource"] == "pve-dc2-01")),
        "{found}"
    );

    phase("delete: a stale generation is refused; the right one removes it and its status");
    let (st, body) = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=1",
            None,
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("stale_generation"))
    );
    assert_eq!(body["current_generation"], 2);
    let (st, body) = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=2",
            None,
        )
        .await;
    assert!(st.is_success(), "{st} {body}");
    assert!(o.engine.plan_state(&web)?.is_none());
    assert!(!o.node.read(|s| s.statuses.contains_key(&web)));
    let (st, _) = api.get("/api/v1/plans/web").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(api.plan_status("web").await.is_none());
    assert!(
        o.engine.config().plan("web").is_none(),
        "the engine no longer decides it"
    );
    let decisions = || {
        o.engine
            .events()
            .iter()
            .filter(|e| e.plan.as_deref() == Some("web") && e.kind == EventKind::Decision)
            .count()
    };
    let before = decisions();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        decisions(),
        before,
        "no decision about web after its deletion"
    );

    phase("a record that no longer validates is out of force but listed, and can be deleted");
    let doc = o
        .node
        .read(|s| {
            s.plans
                .get(&PlanId::new("web2").ok()?)
                .map(|r| r.state.clone())
        })
        .expect("web2's state");
    let r = o
        .node
        .write(qfence_cluster::state::Command::CreatePlan {
            plan: PlanId::new("stale")?,
            config: json!({"source": "api", "spec": spec("bmc-gone"), "created_by": "bob"}),
            initial_state: doc,
        })
        .await?;
    assert_eq!(r, qfence_cluster::state::Response::Applied);
    let cfg = o.engine.config();
    assert!(cfg.plan("stale").is_none());
    assert!(cfg.plan("erp-db").is_some() && cfg.plan("web2").is_some());
    assert!(
        cfg.dropped
            .iter()
            .any(|d| d.contains("plan stale") && d.contains("bmc-gone")),
        "{:?}",
        cfg.dropped
    );
    let (_, list) = api.get("/api/v1/plans").await;
    assert!(
        list.as_array().is_some_and(|l| l
            .iter()
            .any(|p| p["name"] == "stale" && p["source"] == "api")),
        "{list}"
    );
    assert!(api.plan_status("stale").await.is_none(), "not decided");
    let (st, body) = api
        .call(
            Method::DELETE,
            "/api/v1/plans/stale?expected_generation=1",
            None,
        )
        .await;
    assert!(st.is_success(), "{st} {body}");
    assert!(o.engine.config().dropped.is_empty());

    phase("every operator action is in the event log with its actor");
    let log = messages(&o);
    for wanted in [
        "Created plan web",
        "Staged a change of plan web",
        "Applied the staged change of plan web",
        "Registered controller bmc-dc2-api",
        "Created plan web2",
        "Deleted plan web",
    ] {
        assert!(
            log.iter().any(|m| m.starts_with(wanted)),
            "{wanted:?} in {log:#?}"
        );
    }
    assert_eq!(
        o.engine
            .plan_state(&lab::plan())?
            .map(|s| s.owner.to_string())
            .as_deref(),
        Some("dc1"),
        "erp-db was not disturbed"
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_orchestrator_sees_api_plans_and_a_new_leader_decides_them() -> Result<()> {
    let sims = Sims::start().await?;
    // Both sites may call every controller, so either leader can run the plan alone.
    let text = sims.config_text();
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let dc1 = Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, true).await?;
    let seed = dc1.node.member().address.clone();
    let dc2 = Orchestrator::start_as(&text, "dc2-a", "dc2", &ca, Some(&seed), true).await?;
    let at_dc1 = Http::over(&dc1);
    let at_dc2 = Http::over(&dc2);
    let web = PlanId::new("web")?;

    phase("dc1-a leads; a plan and a controller created there");
    let (st, body) = at_dc1
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");

    phase("the follower dc2-a lists it, from the replicated state");
    let seen = eventually(Duration::from_secs(10), "web at dc2-a", || async {
        let (st, p) = at_dc2.get("/api/v1/plans/web").await;
        (st == StatusCode::OK).then_some(p)
    })
    .await?;
    assert_eq!(seen["source"], "api");
    assert_eq!(seen["generation"], 1);
    assert!(dc2.engine.config().plan("web").is_some());

    phase("a write at the follower is the leader's: nothing staged there is a conflict");
    let (st, body) = at_dc2
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict")),
        "{body}"
    );

    phase("leadership moves to dc2-a: it decides web, as the old leader did");
    dc1.node.transfer_leadership(dc2.node.name()).await?;
    eventually(Duration::from_secs(20), "dc2-a leading", || async {
        (dc2.node.leader().as_ref() == Some(dc2.node.name())).then_some(())
    })
    .await?;
    let p = eventually(Duration::from_secs(30), "web decided by dc2-a", || async {
        let p = at_dc2.plan_status("web").await?;
        (verdict_of(&p, "dc2").as_deref() == Some("FENCED")
            && !p["last_reason"].as_str()?.contains("[leader"))
        .then_some(p)
    })
    .await?;
    assert_eq!(p["owner"], "dc1");
    // Its own reading of dc1's health comes in beside the fence readings, not necessarily
    // before the first status that shows them.
    eventually(
        Duration::from_secs(10),
        "dc2-a read web's health itself",
        || async {
            dc2.engine
                .runtime(&web)
                .observations
                .contains_key(&dc2.key("web", "dc1", 1))
                .then_some(())
        },
    )
    .await?;

    phase("the new leader changes it; the old one sees the change");
    let mut changed = spec("bmc-dc2");
    changed["max_retries"] = json!(4);
    let (st, body) = at_dc2
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": changed})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let (st, body) = at_dc2
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    eventually(Duration::from_secs(10), "the change at dc1-a", || async {
        let (_, p) = at_dc1.get("/api/v1/plans/web").await;
        (p["generation"] == 2 && p["spec"]["max_retries"] == 4).then_some(())
    })
    .await?;
    assert_eq!(
        dc1.engine.config().plan("web").map(|p| p.max_retries),
        Some(4)
    );

    phase("a controller registered at dc2-a that only dc1 may call: dc1-a builds it when asked");
    let pve = json!({"type": "proxmox", "endpoint": sims.pve1.base_url(), "site": "dc1",
        "secret": "lab-proxmox", "token_id": "qfence@pve!fence", "timeout_seconds": 2,
        "tls": {"pin": format!("sha256:{}", sims.pve1.fingerprint())}});
    let (st, body) = at_dc2
        .post(
            "/api/v1/controllers",
            json!({"name": "pve-dc1-api", "spec": pve}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let mut bound = spec("bmc-dc2");
    bound["instances"]["dc1"][1]["controller"] = json!("pve-dc1-api");
    let (st, body) = at_dc2
        .post("/api/v1/plans", json!({"name": "web2", "spec": bound}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let web2 = PlanId::new("web2")?;
    let read = eventually(
        Duration::from_secs(20),
        "web2's dc1 health read at dc1-a",
        || async {
            dc2.engine
                .runtime(&web2)
                .observations
                .get(&dc2.key("web2", "dc1", 1))
                .filter(|o| o.value == Observed::Holds)
                .cloned()
        },
    )
    .await?;
    assert!(read.detail.contains("read by dc1-a"), "{}", read.detail);

    phase("the leader tests it (run at dc1-a); the follower lists the grades");
    let (st, test) = at_dc2
        .post("/api/v1/controllers/pve-dc1-api/test", json!({}))
        .await;
    assert_eq!(st, StatusCode::OK, "{test}");
    assert!(
        test["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("Run by dc1-a"),
        "{test}"
    );
    let listed = eventually(Duration::from_secs(10), "grades at dc1-a", || async {
        let (_, list) = at_dc1.get("/api/v1/controllers").await;
        list.as_array()?
            .iter()
            .find(|c| c["name"] == "pve-dc1-api" && c["tested_at_ms"].is_u64())
            .cloned()
    })
    .await?;
    assert_eq!(listed["grades"], test["grades"]);

    dc1.shutdown().await;
    dc2.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_in_transition_is_neither_changed_nor_deleted() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);
    let web = PlanId::new("web")?;
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let mut changed = spec("bmc-dc2");
    changed["max_retries"] = json!(5);
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": changed})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");

    phase("paused, then put in a halted switchover (written as the engine would)");
    let (st, body) = api.post("/api/v1/plans/web/pause", json!({})).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let paused = eventually(Duration::from_secs(10), "web paused", || async {
        o.engine.plan_state(&web).ok()?.filter(|s| s.paused)
    })
    .await?;
    let mut next = paused.clone();
    next.revision += 1;
    next.phase = Phase::Transition(Transition {
        kind: TransitionKind::Switchover {
            by: "test".into(),
            why: "held".into(),
        },
        from: lab::site("dc1"),
        target: lab::site("dc2"),
        started: Millis(0),
        stage: Stage::Preflight,
        after_verify: Stage::Readiness,
        stage_started: Millis(0),
        attempt: 0,
        retry_at: None,
        term: o.node.term(),
        pending: Default::default(),
        entered: false,
        halted: Some("held by the test".into()),
        fenced: Vec::new(),
        escalated: false,
    });
    let doc = PlanStateDoc::encode(
        PLAN_STATE_SCHEMA,
        next.generation,
        &StoredPlanState::from(next.clone()),
    )?;
    let r = o
        .node
        .write(ClusterCommand::PlanStateCas {
            plan: web.clone(),
            expected_generation: paused.generation,
            new_state: doc,
        })
        .await?;
    assert_eq!(r, Response::Applied);

    phase("apply and delete are refused while it runs, and change nothing");
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("refused")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap_or("").contains("under way"),
        "{body}"
    );
    let (st, body) = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=1",
            None,
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("refused")),
        "{body}"
    );
    let state = o.engine.plan_state(&web)?.expect("web is still there");
    assert_eq!(state.generation.0, 1);
    assert!(state.transition().is_some());
    let (_, view) = api.get("/api/v1/plans/web").await;
    assert_eq!(
        view["staged"]["spec"]["max_retries"], 5,
        "the staged change waits"
    );
    assert_eq!(
        o.engine.config().plan("web").map(|p| p.max_retries),
        Some(2)
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

/// Issue 13: keys are binding ids, not places. A check of dc2's fence is in flight when a
/// change inserts a binding in front of that fence: the check's reading is filed under
/// the fence, at its new place, and never counts as the new binding's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_inserted_before_a_fence_leaves_the_fences_reading_with_the_fence() -> Result<()>
{
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);
    let web = PlanId::new("web")?;
    // A long fence timeout: the slow check below is cut by the controller's timeout only.
    let mut first = spec("bmc-dc2");
    first["fence_timeout_seconds"] = json!(10);

    phase("web is created and reads dc2 FENCED");
    let (st, body) = api
        .post("/api/v1/plans", json!({"name": "web", "spec": first}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    eventually(Duration::from_secs(20), "web's dc2 FENCED", || async {
        let p = api.plan_status("web").await?;
        (verdict_of(&p, "dc2").as_deref() == Some("FENCED")).then_some(())
    })
    .await?;
    let fence = o.key("web", "dc2", 0);

    phase("a change is staged that puts a readiness binding in front of dc2's fence");
    let mut edited = first.clone();
    edited["instances"]["dc2"].as_array_mut().unwrap().insert(
        0,
        json!({"controller": "pve-dc2", "capability": "replication.lag", "resource": "101-1",
               "role": "readiness", "params": {"max_age_seconds": 120}}),
    );
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": edited})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    phase("dc2's BMC answers slowly; a check of dc2's fence starts after that");
    let earlier: Vec<_> = o.engine.runtime(&web).in_flight.keys().cloned().collect();
    sims.bmc2.faults().set_latency(Duration::from_secs(4));
    let op = eventually(
        Duration::from_secs(20),
        "a slow check of dc2's fence",
        || async {
            o.engine
                .runtime(&web)
                .in_flight
                .iter()
                .find(|(op, k)| **k == fence && !earlier.contains(op))
                .map(|(op, _)| op.clone())
        },
    )
    .await?;

    phase("while it runs, the change is applied");
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let applied = o.engine.clock().now();
    assert!(
        o.engine.runtime(&web).in_flight.contains_key(&op),
        "the check was still running when the change was applied"
    );
    let (inserted, moved) = (o.key("web", "dc2", 0), o.key("web", "dc2", 1));
    assert_eq!(moved, fence, "the fence keeps its key at its new place");
    assert_ne!(inserted, fence);

    phase("the check ends: its reading is the fence's, not the new binding's");
    let (result, reading) = eventually(Duration::from_secs(15), "the check's result", || async {
        let view = o.engine.runtime(&web);
        let r = view.results.get(&op)?.clone();
        Some((r, view.observations.get(&fence).cloned()))
    })
    .await?;
    assert_eq!(result.binding.as_ref(), Some(&moved), "{result:?}");
    assert!(result.at < applied, "read before the change: {result:?}");
    let reading = reading.expect("the fence's reading is filed");
    // The check's own reading (a slow one may have timed out: what counts is where it went).
    assert_eq!(reading.at, result.at, "{reading:?}");
    assert!(
        o.engine
            .runtime(&web)
            .observations
            .get(&inserted)
            .is_none_or(|ob| ob.at >= applied),
        "the new binding has only its own readings"
    );
    sims.bmc2.faults().set_latency(Duration::ZERO);
    eventually(
        Duration::from_secs(20),
        "web's dc2 FENCED after the change",
        || async {
            let p = api.plan_status("web").await?;
            (verdict_of(&p, "dc2").as_deref() == Some("FENCED")).then_some(())
        },
    )
    .await?;

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
