//! What registration proves is enforced (issue 12), through the API, the console and the
//! metrics of a running orchestrator against the lab simulators: a capability graded failed
//! is refused, never offered and shown for the file's plan; a second controller of the same
//! system is warned of; a plan's bindings are checked when written; every fence first checks
//! the identity pinned by the controller's test and where the binding's VM is.

use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use qfence_call::{Call, ErrorKind, PreFence, Target, Verb};
use qfence_lab::proxmox::{Node, VmStatus};
use qfence_lab::redfish::{PowerState, Role};
use qfence_model::ControllerId;
use qfence_runtime::events::EventKind;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::api_plans::{ADMIN, Http, spec};
use crate::lab::{self, Orchestrator, Sims, eventually, phase};

const HOST: &str = "console.test:8443";

/// A console request as a signed-in admin's browser sends it (a form when `form` is given).
async fn console(
    api: &Http,
    method: Method,
    path: &str,
    form: Option<&str>,
) -> (StatusCode, String) {
    let b = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, HOST)
        .header(header::ORIGIN, format!("https://{HOST}"))
        .header(header::COOKIE, format!("qfence_session={ADMIN}"));
    let req = match form {
        Some(f) => b
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(f.to_owned())),
        None => b.body(Body::empty()),
    }
    .expect("a request");
    let resp = api.0.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The `<select>` named `name` on a page.
fn select<'a>(html: &'a str, name: &str) -> &'a str {
    let at = html
        .find(&format!("<select name=\"{name}\""))
        .unwrap_or_else(|| panic!("the page has a select {name}"));
    let end = at + html[at..].find("</select>").expect("closed");
    &html[at..end]
}

/// `POST /api/v1/controllers/NAME/test`, once the orchestrator has registered the file's
/// controllers with the cluster (it does so as it starts).
async fn test_controller(api: &Http, name: &str) -> Result<Value> {
    eventually(Duration::from_secs(20), "the controller test", || async {
        let (st, body) = api
            .post(&format!("/api/v1/controllers/{name}/test"), json!({}))
            .await;
        (st == StatusCode::OK).then_some(body)
    })
    .await
}

fn grade_of<'a>(test: &'a Value, capability: &str) -> &'a Value {
    test["grades"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["capability"] == capability))
        .unwrap_or_else(|| panic!("{capability} is graded: {test}"))
}

fn warnings(test: &Value) -> Vec<String> {
    test["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_graded_failed_is_refused_never_offered_and_shown_before_it_is_needed()
-> Result<()> {
    let sims = Sims::start().await?;
    phase("dc2's BMC account is read-only: power.off cannot work through it");
    sims.bmc2
        .update(|s| s.accounts.iter_mut().for_each(|a| a.role = Role::ReadOnly));
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);

    let test = test_controller(&api, "bmc-dc2").await?;
    assert_eq!(grade_of(&test, "power.off")["grade"], "failed", "{test}");
    let reason = grade_of(&test, "power.off")["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!reason.is_empty(), "{test}");

    phase("the file's erp-db binds it: the status says so, before any fence is needed");
    let (_, status) = api.get("/api/v1/status").await;
    let erp = &status["plans"][0];
    assert_eq!(erp["plan"], "erp-db");
    let bad = erp["unworkable"].as_array().cloned().unwrap_or_default();
    assert_eq!(bad.len(), 1, "{erp}");
    assert_eq!(bad[0]["path"], "plans.erp-db.instances.dc2[0].capability");
    assert_eq!(bad[0]["site"], "dc2");
    assert_eq!(bad[0]["reason"], reason.as_str());

    phase("and the metrics raise a capability_failed alarm for dc2");
    eventually(
        Duration::from_secs(10),
        "the capability_failed alarm",
        || async {
            o.metrics
                .render()
                .contains(
                    r#"qfence_plan_alarm{plan="erp-db",site="dc2",kind="capability_failed"} 1"#,
                )
                .then_some(())
        },
    )
    .await?;

    phase("the console's overview and plan page say it in words");
    let (st, html) = console(&api, Method::GET, "/", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        html.contains("bound to a capability that cannot work"),
        "{html}"
    );
    let (_, html) = console(&api, Method::GET, "/plans/erp-db", None).await;
    assert!(
        html.contains(
            "plans.erp-db.instances.dc2[0].capability: bound to a capability that cannot work"
        ),
        "{html}"
    );

    phase("a plan that binds it through the API: 409 capability_failed, the field named");
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("capability_failed")),
        "{body}"
    );
    assert_eq!(
        body["issues"][0]["path"],
        "plans.web.instances.dc2[0].capability"
    );
    assert!(
        body["issues"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains(&reason),
        "{body}"
    );
    let (st, _) = api.get("/api/v1/plans/web").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "nothing was created");

    phase("the console's editor never offers it for bmc-dc2, and refuses it on the field");
    let (st, html) = console(
        &api,
        Method::POST,
        "/plans/new",
        Some("action=refresh&name=web&owner=dc1&b:dc2:0:controller=bmc-dc2"),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{html}");
    let caps = select(&html, "b:dc2:0:capability");
    assert!(caps.contains(r#"value="power.status""#), "{caps}");
    assert!(!caps.contains(r#"value="power.off""#), "{caps}");
    assert!(
        html.contains(r#""failed":["power.off"]"#),
        "the script is told too"
    );
    let caps = select(&html, "b:dc1:0:capability");
    assert!(caps.contains(r#"value="power.off""#), "{caps}");
    let form = "action=create&name=web&owner=dc1\
        &b:dc1:0:controller=bmc-dc1&b:dc1:0:capability=power.off&b:dc1:0:resource=pve-dc1-01&b:dc1:0:role=fence\
        &b:dc1:1:controller=pve-dc1&b:dc1:1:capability=vm.status&b:dc1:1:resource=pve-dc1-01/101&b:dc1:1:role=health\
        &b:dc2:0:controller=bmc-dc2&b:dc2:0:capability=power.off&b:dc2:0:resource=pve-dc2-01&b:dc2:0:role=fence\
        &b:dc2:1:controller=pve-dc2&b:dc2:1:capability=vm.status&b:dc2:1:resource=pve-dc2-01/101&b:dc2:1:role=health";
    let (st, html) = console(&api, Method::POST, "/plans/new", Some(form)).await;
    assert_eq!(st, StatusCode::CONFLICT, "{html}");
    assert!(
        html.contains(
            r#"data-for="b:dc2:0:capability">power.off of controller bmc-dc2 was graded failed"#
        ) && html.contains("role ReadOnly"),
        "{html}"
    );

    phase("the account fixed and tested again: nothing is unworkable, the plan is taken");
    sims.bmc2
        .update(|s| s.accounts.iter_mut().for_each(|a| a.role = Role::Operator));
    let (_, test) = api
        .post("/api/v1/controllers/bmc-dc2/test", json!({}))
        .await;
    assert_ne!(grade_of(&test, "power.off")["grade"], "failed", "{test}");
    let (_, status) = api.get("/api/v1/status").await;
    assert_eq!(status["plans"][0]["unworkable"], json!([]), "{status}");
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    eventually(Duration::from_secs(10), "the alarm cleared", || async {
        (!o.metrics.render().contains(r#"kind="capability_failed""#)).then_some(())
    })
    .await?;

    phase("a change staged, then power.off fails again: applying the change is refused");
    let mut change = spec("bmc-dc2");
    change["fence_timeout_seconds"] = json!(4);
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": change})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    sims.bmc2
        .update(|s| s.accounts.iter_mut().for_each(|a| a.role = Role::ReadOnly));
    let test = test_controller(&api, "bmc-dc2").await?;
    assert_eq!(grade_of(&test, "power.off")["grade"], "failed", "{test}");
    let (st, body) = api
        .post("/api/v1/plans/web/apply", json!({"expected_generation": 1}))
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("capability_failed")),
        "{body}"
    );
    let (_, view) = api.get("/api/v1/plans/web").await;
    assert_eq!(view["generation"], 1, "nothing was applied: {view}");

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_controller_of_the_same_system_is_warned_of_through_the_api() -> Result<()> {
    let sims = Sims::start().await?;
    // The two lab BMCs are distinct systems: give dc2's its own service UUID.
    sims.bmc2
        .update(|s| s.service_uuid = "0e5b1d6c-2222-4bbb-8ccc-000000000002".into());
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);

    phase("bmc-dc1 and bmc-dc2 tested: two systems, no warning of a duplicate");
    let one = test_controller(&api, "bmc-dc1").await?;
    let two = test_controller(&api, "bmc-dc2").await?;
    let (_, list) = api.get("/api/v1/controllers").await;
    let listed = list
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == "bmc-dc1").cloned())
        .expect("bmc-dc1 listed");
    assert_eq!(
        listed["identity"], one["identity"],
        "the test pinned it: {listed}"
    );
    assert!(
        !warnings(&two).iter().any(|w| w.contains("same identity")),
        "{two}"
    );

    phase("the same BMC registered again under another name and address");
    // localhost, not 127.0.0.1: another endpoint, so only the identity can tell.
    let endpoint = sims.bmc1.base_url().replace("127.0.0.1", "localhost");
    let spec = json!({"type": "redfish", "endpoint": endpoint, "site": "dc1", "reach": ["dc2"],
        "secret": "lab-redfish", "username": "qfence", "timeout_seconds": 2,
        "tls": {"pin": format!("sha256:{}", sims.bmc1.fingerprint())}});

    phase("probed before registering: warned of");
    let (st, probe) = api
        .post(
            "/api/v1/controllers/probe",
            json!({"name": "bmc-dc1-again", "spec": spec}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{probe}");
    let same = format!(
        "controller bmc-dc1 has the same identity {}",
        one["identity"].as_str().unwrap_or("?")
    );
    assert!(
        warnings(&probe).iter().any(|w| w.contains(&same)),
        "{probe}"
    );

    phase("registered and tested: warned of, and not of the endpoint");
    let (st, body) = api
        .post(
            "/api/v1/controllers",
            json!({"name": "bmc-dc1-again", "spec": spec}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let (st, again) = api
        .post("/api/v1/controllers/bmc-dc1-again/test", json!({}))
        .await;
    assert_eq!(st, StatusCode::OK, "{again}");
    let w = warnings(&again);
    assert!(
        w.iter()
            .any(|w| w.contains(&same) && w.contains("both drive the same system")),
        "{again}"
    );
    assert!(!w.iter().any(|w| w.contains("same endpoint")), "{again}");

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_whose_bindings_name_what_is_not_there_is_refused_with_the_field() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);
    eventually(Duration::from_secs(20), "dc2 FENCED", || async {
        let p = api.plan_status("erp-db").await?;
        (p["sites"][1]["verdict"] == "FENCED").then_some(())
    })
    .await?;

    phase("VM 999 does not exist at dc2, and the replication job 101-9 neither");
    let mut bad = spec("bmc-dc2");
    bad["instances"]["dc2"][1]["resource"] = json!("pve-dc2-01/999");
    bad["instances"]["dc2"]
        .as_array_mut()
        .expect("dc2's bindings")
        .push(
            json!({"controller": "pve-dc2", "capability": "replication.lag",
            "resource": "101-9", "role": "readiness"}),
        );
    let (st, body) = api
        .post("/api/v1/plans", json!({"name": "web", "spec": bad}))
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("binding_check_failed")),
        "{body}"
    );
    let issues = body["issues"].as_array().cloned().unwrap_or_default();
    let at = |path: &str| {
        issues
            .iter()
            .find(|i| i["path"] == path)
            .and_then(|i| i["message"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        at("plans.web.instances.dc2[1].resource").contains("VM 999 is not visible"),
        "{body}"
    );
    assert!(
        at("plans.web.instances.dc2[3].resource").contains("replication job 101-9 does not exist"),
        "{body}"
    );
    assert_eq!(issues.len(), 2, "the bindings that are there pass: {body}");
    let (st, _) = api.get("/api/v1/plans/web").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "nothing was created");

    phase("created right, then a staged change moving dc1's health to a VM not there");
    let (st, body) = api
        .post(
            "/api/v1/plans",
            json!({"name": "web", "spec": spec("bmc-dc2")}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let mut change = spec("bmc-dc2");
    change["instances"]["dc1"][1]["resource"] = json!("pve-dc1-01/102");
    let (st, body) = api
        .call(
            Method::PUT,
            "/api/v1/plans/web/staged",
            Some(json!({"spec": change})),
        )
        .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("binding_check_failed")),
        "{body}"
    );
    assert_eq!(
        body["issues"][0]["path"],
        "plans.web.instances.dc1[1].resource"
    );
    let (_, view) = api.get("/api/v1/plans/web").await;
    assert_eq!(view["staged"], Value::Null, "nothing was staged: {view}");

    phase("the console's editor shows the refusal on the resource field");
    let form = "action=create&name=web3&owner=dc1\
        &b:dc1:0:controller=bmc-dc1&b:dc1:0:capability=power.off&b:dc1:0:resource=pve-dc1-01&b:dc1:0:role=fence\
        &b:dc1:1:controller=pve-dc1&b:dc1:1:capability=vm.status&b:dc1:1:resource=pve-dc1-01/101&b:dc1:1:role=health\
        &b:dc2:0:controller=bmc-dc2&b:dc2:0:capability=power.off&b:dc2:0:resource=pve-dc2-01&b:dc2:0:role=fence\
        &b:dc2:1:controller=pve-dc2&b:dc2:1:capability=vm.status&b:dc2:1:resource=pve-dc2-01/999&b:dc2:1:role=health";
    let (st, html) = console(&api, Method::POST, "/plans/new", Some(form)).await;
    assert_eq!(st, StatusCode::CONFLICT, "{html}");
    assert!(
        html.contains(r#"data-for="b:dc2:1:resource""#) && html.contains("VM 999 is not visible"),
        "{html}"
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_through_a_bmc_that_answers_with_another_identity_is_not_sent() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let api = Http::over(&o);

    phase("bmc-dc1 tested: its identity is pinned");
    test_controller(&api, "bmc-dc1").await?;
    eventually(Duration::from_secs(20), "dc2 FENCED", || async {
        let p = api.plan_status("erp-db").await?;
        (p["sites"][1]["verdict"] == "FENCED").then_some(())
    })
    .await?;

    // A failover, not a planned switchover: a switchover stops dc1's VM and never powers the
    // host off, so it would not call bmc-dc1's power.off at all.
    phase("dc1's BMC address now answers as another BMC; a failover to dc2 must fence dc1");
    sims.bmc1
        .update(|s| s.service_uuid = "7f000001-dead-4bee-8000-00000000beef".into());
    let (st, body) = api
        .post(
            "/api/v1/plans/erp-db/failover",
            json!({"target": "dc2", "expected_generation": 1}),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{body}");

    phase("the fence through bmc-dc1 is refused with the reason, and not sent");
    let refused = eventually(Duration::from_secs(30), "the pre-fence refusal", || async {
        o.engine.events().into_iter().find(|e| {
            e.kind == EventKind::Result
                && e.data["controller"] == "bmc-dc1"
                && e.message
                    .contains("pre-fence check found controller bmc-dc1 answering as")
        })
    })
    .await?;
    assert_eq!(refused.data["outcome"], "failed", "{:?}", refused.data);
    assert!(
        refused
            .message
            .contains("redfish-service:7f000001-dead-4bee-8000-00000000beef"),
        "{}",
        refused.message
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        sims.bmc1.snapshot().systems[0].power,
        PowerState::On,
        "no power.off was sent through a BMC of another identity"
    );
    let state = o.engine.plan_state(&lab::plan())?.expect("registered");
    assert_eq!(state.owner.as_str(), "dc1", "the failover did not commit");
    assert_eq!(sims.vip(), ["10.1.1.5"]);

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_of_a_vm_that_moved_to_another_node_is_refused_and_the_vm_left_running()
-> Result<()> {
    let sims = Sims::start().await?;
    // The engine stays idle: the test is the executor's call, as a leader sends it.
    let o = Orchestrator::start(&sims.config_text(), false).await?;
    sims.pve1.update(|s| {
        s.nodes.push(Node::new("pve-dc1-02", 2, "10.1.0.12"));
        if let Some(vm) = s.vms.iter_mut().find(|v| v.vmid == 101) {
            vm.node = "pve-dc1-02".into();
        }
    });
    let call = Call {
        pre_fence: Some(PreFence { identity: None }),
        ..Call::new(
            Verb::Perform,
            Target {
                capability: "vm.stop".into(),
                resource: "pve-dc1-01/101".into(),
                params: Default::default(),
                site: lab::site("dc1"),
            },
            Duration::from_millis(3_000),
        )
    };
    let answer = o
        .drivers
        .run(
            &ControllerId::new("pve-dc1")?,
            &call,
            CancellationToken::new(),
        )
        .await
        .map_err(anyhow::Error::msg)?;
    let Err(e) = answer else {
        panic!("a fence of the wrong place is refused: {answer:?}");
    };
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(!e.state_unknown, "nothing was sent: {e:?}");
    assert!(
        e.message
            .contains("VM 101 is on node pve-dc1-02, not pve-dc1-01"),
        "{}",
        e.message
    );
    let vm = sims.pve1.snapshot().vm(101).cloned().expect("VM 101");
    assert_eq!(vm.status, VmStatus::Running, "the VM was not stopped");

    phase("a pinned identity that does not match: refused before the binding is even read");
    let pinned = Call {
        pre_fence: Some(PreFence {
            identity: Some("proxmox-cluster:elsewhere".into()),
        }),
        ..call.clone()
    };
    let answer = o
        .drivers
        .run(
            &ControllerId::new("pve-dc1")?,
            &pinned,
            CancellationToken::new(),
        )
        .await
        .map_err(anyhow::Error::msg)?;
    let Err(e) = answer else {
        panic!("refused: {answer:?}");
    };
    assert!(
        e.kind == ErrorKind::Rejected
            && e.message
                .contains("not as proxmox-cluster:elsewhere pinned"),
        "{e:?}"
    );

    phase("the controller cannot be read: UNKNOWN, never a fence sent blind");
    assert!(sims.pve1.set_node_powered("pve-dc1-01", false));
    let answer = o
        .drivers
        .run(
            &ControllerId::new("pve-dc1")?,
            &pinned,
            CancellationToken::new(),
        )
        .await
        .map_err(anyhow::Error::msg)?;
    let Err(e) = answer else {
        panic!("not fenced: {answer:?}");
    };
    assert!(e.state_unknown, "{e:?}");
    assert!(
        e.message
            .starts_with("not fenced: the pre-fence check could not be made"),
        "{}",
        e.message
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
