//! Registration against a real orchestrator (the runtime's backend, its cluster node and
//! drivers) and the lab's Redfish simulator: the fingerprint the page shows is the simulator's
//! certificate, and the grades come from the Redfish driver reading the simulator.

use std::sync::Arc;

use anyhow::{Result, ensure};
use qfence_runtime::Metrics;
use qfence_runtime::RuntimeBackend;
use qfence_server::ApiConfig;

use super::lab::{self, Orchestrator, Sims};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_on_a_real_orchestrator_shows_the_bmcs_certificate_and_grades() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;
    o.engine.register().await?;
    let backend = Arc::new(RuntimeBackend::new(&o.engine, lab::secrets()));
    let app = qfence_server::router(
        backend.clone(),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let served = harness::serve(app).await?;
    let b = Browser::start(&served.base, "register-daemon").await?;
    b.sign_in(ADMIN).await?;

    phase("Steps 1 and 2: a second controller for dc1's BMC, trusting the system roots");
    b.open("/controllers/new").await?;
    b.wait_for("#register-form").await?;
    b.fill("#name", "bmc-dc1-mgmt").await?;
    pick(&b, "type", "redfish").await?;
    pick(&b, "site", "dc1").await?;
    b.click("input[name='reach'][value='dc2']").await?;
    b.fill("#endpoint", &sims.bmc1.base_url()).await?;
    b.fill("#username", "qfence").await?;
    b.screenshot("1-type-and-connection").await?;
    b.click("#next").await?;
    b.fill("#secret", "lab-redfish").await?;
    b.screenshot("2-credentials").await?;
    b.click("#next").await?;

    phase("Step 3: the simulator's certificate fingerprint, to compare and pin");
    b.wait_for("#probe, #form-banner").await?;
    b.screenshot("3-connectivity").await?;
    let fp = b.wait_for("#fingerprint").await?.text().await?;
    let want = sims.bmc1.fingerprint();
    ensure!(
        fp.trim_start_matches("sha256:")
            .replace(':', "")
            .to_lowercase()
            == want.to_lowercase(),
        "the page shows {fp}, the simulator's certificate is {want}"
    );
    b.screenshot("3-connectivity").await?;
    b.click("#pin_fingerprint").await?;
    b.click("#next").await?;

    phase("Step 4: tested again through the pin, each capability graded by the driver");
    b.wait_for("#grades").await?;
    let power_off = b
        .wait_for("#grades tr[data-capability='power.off'] .grade")
        .await?
        .text()
        .await?;
    ensure!(
        ["proven", "inferred", "unverifiable"].contains(&power_off.as_str()),
        "power.off graded {power_off}"
    );
    ensure!(
        b.wait_for("#spec")
            .await?
            .value()
            .await?
            .unwrap_or_default()
            .contains(want)
    );
    b.screenshot("4-capabilities").await?;

    phase("Register: the orchestrator records it, with its pin");
    b.click("#register").await?;
    b.wait_for_text("#registered", "bmc-dc1-mgmt").await?;
    b.wait_for("tr[data-controller='bmc-dc1-mgmt']").await?;
    let row = b
        .wait_for("tr[data-controller='bmc-dc1-mgmt']")
        .await?
        .text()
        .await?;
    ensure!(
        row.contains("power.off proven"),
        "graded once registered: {row}"
    );
    b.screenshot("5-registered").await?;
    {
        use qfence_runtime::Backend;
        let source = backend.config_source().await?;
        ensure!(
            source.contains("bmc-dc1-mgmt") && source.contains(want),
            "the configuration in force has the controller and its pin"
        );
    }

    phase("The controllers list tests a registered BMC through its driver");
    b.open("/controllers").await?;
    b.click("tr[data-controller='bmc-dc1'] button[type=submit]")
        .await?;
    let graded = b
        .wait_for("#grades tr[data-capability='power.off'] .grade")
        .await?
        .text()
        .await?;
    ensure!(graded == "proven", "bmc-dc1's power.off graded {graded}");
    b.screenshot("6-test").await?;
    b.quit().await?;
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

/// The editor as a real orchestrator serves it, over HTTP (no browser): the script's data
/// and the resource fields' datalists hold what the lab's controllers discovered through their
/// drivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_offers_what_the_lab_controllers_discovered() -> Result<()> {
    use tower::ServiceExt;
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;
    // The controllers registered in the cluster (discovery is routed by their records).
    o.engine.register().await?;
    let backend = RuntimeBackend::new(&o.engine, lab::secrets());
    let app = qfence_server::router(
        Arc::new(backend),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let send = |req: axum::http::Request<axum::body::Body>| {
        let app = app.clone();
        async move {
            let resp = app.oneshot(req).await?;
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
            anyhow::Ok((status, String::from_utf8_lossy(&body).into_owned()))
        }
    };
    let get = axum::http::Request::builder()
        .uri("/plans/new")
        .header("host", "127.0.0.1:7400")
        .header("cookie", format!("qfence_session={ADMIN}"))
        .body(axum::body::Body::empty())?;
    let (status, body) = send(get).await?;
    ensure!(status == 200, "{status}: {body}");
    phase("the script's data has every lab controller's list");
    let start = body.find("id=\"editor-data\">").unwrap_or(0) + "id=\"editor-data\">".len();
    let end = start + body[start..].find("</script>").unwrap_or(0);
    let data: serde_json::Value = serde_json::from_str(&body[start..end])?;
    for c in ["bmc-dc1", "bmc-dc2", "pve-dc1", "pve-dc2", "fgt-edge"] {
        ensure!(
            data["discovered"][c]
                .as_array()
                .is_some_and(|l| !l.is_empty()),
            "{c} discovered nothing: {}",
            data["discovered"]
        );
    }
    phase("rows picked without the script: their datalists hold the simulators' VM and job");
    let form = "b%3Adc1%3A0%3Acontroller=pve-dc1&b%3Adc1%3A0%3Acapability=vm.stop\
                &b%3Adc1%3A1%3Acontroller=pve-dc1&b%3Adc1%3A1%3Acapability=replication.lag\
                &action=refresh";
    let post = axum::http::Request::builder()
        .method("POST")
        .uri("/plans/new")
        .header("host", "127.0.0.1:7400")
        .header("origin", "https://127.0.0.1:7400")
        .header("cookie", format!("qfence_session={ADMIN}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(form.replace(' ', "")))?;
    let (status, body) = send(post).await?;
    ensure!(status == 200, "{status}: {body}");
    let datalist = |row: &str| -> Result<String> {
        let open = format!("<datalist id=\"dl-{row}\">");
        let at = body
            .find(&open)
            .map(|i| i + open.len())
            .ok_or_else(|| anyhow::anyhow!("no datalist for {row}"))?;
        let len = body[at..].find("</datalist>").unwrap_or(0);
        Ok(body[at..at + len].to_owned())
    };
    let vms = datalist("b:dc1:0")?;
    ensure!(vms.contains("<option value=\"pve-dc1-01/101\">"), "{vms}");
    let jobs = datalist("b:dc1:1")?;
    ensure!(jobs.contains("<option value=\"101-1\">"), "{jobs}");
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

/// The plan editor on a real orchestrator, over HTTP: a plan created through the console is
/// edited (staged and applied on its generation); a plan from the configuration file is not
/// offered for editing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_creates_and_edits_a_plan_on_a_real_orchestrator() -> Result<()> {
    use tower::ServiceExt;
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;
    o.engine.register().await?;
    let backend = Arc::new(RuntimeBackend::new(&o.engine, lab::secrets()));
    let app = qfence_server::router(
        backend.clone(),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let send = |method: &str, path: &str, form: Option<&str>| {
        let app = app.clone();
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1:7400")
            .header("origin", "https://127.0.0.1:7400")
            .header("cookie", format!("qfence_session={ADMIN}"));
        if form.is_some() {
            b = b.header("content-type", "application/x-www-form-urlencoded");
        }
        let req = b.body(axum::body::Body::from(form.unwrap_or("").to_owned()));
        async move {
            let resp = app.oneshot(req?).await?;
            let status = resp.status();
            let location = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
            anyhow::Ok((
                status,
                location,
                String::from_utf8_lossy(&body).into_owned(),
            ))
        }
    };
    let enc = |pairs: &[(&str, &str)]| -> String {
        pairs
            .iter()
            .map(|(k, v)| {
                let e = |s: &str| {
                    s.bytes()
                        .map(|b| {
                            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                                (b as char).to_string()
                            } else {
                                format!("%{b:02X}")
                            }
                        })
                        .collect::<String>()
                };
                format!("{}={}", e(k), e(v))
            })
            .collect::<Vec<_>>()
            .join("&")
    };
    let plan = |interval: &str| -> Vec<(&'static str, String)> {
        let mut f = vec![
            ("owner", "dc1".to_owned()),
            ("interval_seconds", interval.to_owned()),
        ];
        for (dc, k0, k1, k2, k3) in [
            (
                "dc1",
                "b:dc1:0:controller",
                "b:dc1:0:capability",
                "b:dc1:0:resource",
                "b:dc1:0:role",
            ),
            (
                "dc2",
                "b:dc2:0:controller",
                "b:dc2:0:capability",
                "b:dc2:0:resource",
                "b:dc2:0:role",
            ),
        ] {
            f.push((k0, format!("bmc-{dc}")));
            f.push((k1, "power.off".into()));
            f.push((k2, format!("pve-{dc}-01")));
            f.push((k3, "fence".into()));
        }
        f.push(("b:dc1:0:required", "true".into()));
        f.push(("b:dc2:0:required", "true".into()));
        f
    };
    let form =
        |f: &[(&str, String)]| enc(&f.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>());

    phase("A plan from the configuration file is not offered for editing");
    let (status, _, body) = send("GET", "/plans/erp-db/edit", None).await?;
    ensure!(status == 409, "{status}");
    ensure!(body.contains("comes from the configuration file"), "{body}");

    phase("A new plan is created through the console");
    let mut f = plan("10");
    f.push(("name", "web".into()));
    let (status, location, body) = send("POST", "/plans/new", Some(&form(&f))).await?;
    ensure!(
        status == 303 && location == "/plans/web",
        "{status} {location}: {body}"
    );

    phase("Its edit page shows it at generation 1; the edit is staged and applied");
    let (status, _, body) = send("GET", "/plans/web/edit", None).await?;
    ensure!(status == 200, "{status}: {body}");
    ensure!(body.contains("name=\"expected_generation\" value=\"1\""));
    ensure!(body.contains("value=\"pve-dc2-01\""));
    let mut f = plan("5");
    f.push(("expected_generation", "1".into()));
    let (status, location, body) = send("POST", "/plans/web/edit", Some(&form(&f))).await?;
    ensure!(
        status == 303 && location == "/plans/web",
        "{status} {location}: {body}"
    );
    {
        use qfence_runtime::Backend;
        let v = backend.plan(&qfence_model::PlanId::new("web")?).await?;
        ensure!(v.generation == 2, "applied: generation {}", v.generation);
        ensure!(v.spec["interval_seconds"] == 5, "{}", v.spec);
    }

    phase("The same edit again, on generation 1, is stale");
    let (status, _, body) = send("POST", "/plans/web/edit", Some(&form(&f))).await?;
    ensure!(status == 409, "{status}");
    ensure!(body.contains("it is at generation 2, your edit started from generation 1"));
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
