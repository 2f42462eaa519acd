//! `qfence serve`'s daemon in process: an empty data directory becomes a one-voter cluster,
//! the API answers over HTTPS with the node's certificate, and a restart on the same data
//! directory keeps the plan's state and continues the event log's chain.

use std::time::Duration;

use anyhow::Result;
use qfence_cluster::node::Timing;
use qfence_model::OrchestratorId;
use qfence_runtime::events::{VerifyOptions, read_jsonl, verify};
use qfence_runtime::{Access, OrchestratorOptions, TokenStore};
use qfence_server::{Daemon, DaemonOptions};
use serde_json::{Value, json};

use crate::lab::{self, Sims, eventually, phase};

pub(crate) const TOKEN: &str = "oncall-token-7";

pub(crate) async fn start(sims: &Sims, data: &std::path::Path) -> Result<Daemon> {
    start_with(sims, data, Access::Operator).await
}

async fn start_with(sims: &Sims, data: &std::path::Path, access: Access) -> Result<Daemon> {
    let text = sims.config_text();
    let config = match qfence_model::config::load_str(&text, "lab.yaml") {
        Ok(l) => l.config,
        Err(issues) => anyhow::bail!("{issues:?}"),
    };
    Ok(Daemon::start(DaemonOptions {
        orchestrator: OrchestratorOptions {
            config,
            config_text: text,
            name: OrchestratorId::new("dc1-a")?,
            data_dir: data.to_owned(),
            cluster_listen: Some("127.0.0.1:0".parse()?),
            secrets: lab::secrets(),
            timing: Timing::fast(),
            join: None,
            write_join_tokens: false,
            notifier: None,
        },
        tokens: TokenStore::default().with_token(access, "oncall", TOKEN),
        api_listen: "127.0.0.1:0".parse()?,
    })
    .await?)
}

/// A client trusting only the cluster CA the daemon created in its data directory.
pub(crate) fn client(data: &std::path::Path, d: &Daemon) -> Result<reqwest::Client> {
    let pem = std::fs::read(data.join("ca/ca.pem"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .resolve("localhost", d.api_addr)
        .build()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_the_api_over_https_and_restarts_where_it_stopped() -> Result<()> {
    let sims = Sims::start().await?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");

    phase("an empty data directory becomes a one-voter cluster; the API answers over HTTPS");
    let d = start(&sims, &data).await?;
    assert!(
        d.orchestrator.unavailable.is_empty(),
        "{:?}",
        d.orchestrator.unavailable
    );
    assert_eq!(d.api_fingerprint.len(), 64);
    let c = client(&data, &d)?;
    let base = format!("https://localhost:{}/api/v1", d.api_addr.port());
    let status: Value = eventually(
        Duration::from_secs(20),
        "dc2 FENCED over the API",
        || async {
            let s: Value = c
                .get(format!("{base}/status"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (s["plans"][0]["sites"][1]["verdict"] == "FENCED").then_some(s)
        },
    )
    .await?;
    assert_eq!(status["leader"]["is_self"], true);
    assert_eq!(status["plans"][0]["owner"], "dc1");
    assert_eq!(status["plans"][0]["generation"], 1);

    phase("a switchover against an old generation is answered 409 with the current one");
    let r = c
        .post(format!("{base}/plans/erp-db/switchover"))
        .bearer_auth(TOKEN)
        .json(&json!({"target": "dc2", "expected_generation": 5}))
        .send()
        .await?;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await?;
    assert_eq!(body["code"], "stale_generation");
    assert_eq!(body["current_generation"], 1);
    let unauthenticated = c.get(format!("{base}/status")).send().await?;
    assert_eq!(unauthenticated.status(), 401);

    phase("a drain with nothing running returns at once; then the daemon stops");
    assert_eq!(d.drain(Duration::from_secs(5)).await, 0);
    d.shutdown().await;
    let before = read_jsonl(&data.join("events.jsonl"))?.len();
    assert!(before > 0);

    phase("restarted on the same data directory: same cluster, same state, the chain goes on");
    drop(c);
    // In one process the old node's last tasks may still hold the database for a moment.
    let mut d = start(&sims, &data).await;
    for _ in 0..50 {
        if d.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        d = start(&sims, &data).await;
    }
    let d = d?;
    let c = client(&data, &d)?;
    let base = format!("https://localhost:{}/api/v1", d.api_addr.port());
    let status: Value = c
        .get(format!("{base}/status"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(status["plans"][0]["generation"], 1);
    eventually(Duration::from_secs(10), "new records", || async {
        (read_jsonl(&data.join("events.jsonl")).ok()?.len() > before).then_some(())
    })
    .await?;
    d.shutdown().await;
    let records = read_jsonl(&data.join("events.jsonl"))?;
    verify(&records, &VerifyOptions::default()).map_err(|b| anyhow::anyhow!("{b:?}"))?;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_created_through_the_api_survives_a_restart() -> Result<()> {
    let sims = Sims::start().await?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let d = start_with(&sims, &data, Access::Admin).await?;
    let c = client(&data, &d)?;
    let base = format!("https://localhost:{}/api/v1", d.api_addr.port());

    phase("create a plan over HTTPS, then stage a change to it");
    let mut spec = json!({"owner": "dc2", "interval_seconds": 1, "auto_failover": false,
        "failover_after_seconds": 1200, "recovery_after_seconds": 600,
        "fence_timeout_seconds": 3, "instances": {}});
    for dc in ["dc1", "dc2"] {
        spec["instances"][dc] = json!([
            {"controller": format!("bmc-{dc}"), "capability": "power.off",
             "resource": format!("pve-{dc}-01"), "role": "fence", "required": true},
            {"controller": format!("pve-{dc}"), "capability": "vm.status",
             "resource": format!("pve-{dc}-01/101"), "role": "health"}
        ]);
    }
    let r = c
        .post(format!("{base}/plans"))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "kept", "spec": spec}))
        .send()
        .await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let mut staged = spec.clone();
    staged["max_retries"] = json!(3);
    let r = c
        .put(format!("{base}/plans/kept/staged"))
        .bearer_auth(TOKEN)
        .json(&json!({"spec": staged}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    d.shutdown().await;

    phase("restarted on the same data directory: the plan, its generation and staged change");
    drop(c);
    let mut d = start_with(&sims, &data, Access::Admin).await;
    for _ in 0..50 {
        if d.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        d = start_with(&sims, &data, Access::Admin).await;
    }
    let d = d?;
    let c = client(&data, &d)?;
    let base = format!("https://localhost:{}/api/v1", d.api_addr.port());
    let plan: Value = c
        .get(format!("{base}/plans/kept"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(plan["source"], "api", "{plan}");
    assert_eq!(plan["generation"], 1);
    assert_eq!(plan["spec"]["owner"], "dc2");
    assert_eq!(plan["staged"]["spec"]["max_retries"], 3);
    eventually(
        Duration::from_secs(20),
        "kept decided after the restart",
        || async {
            let s: Value = c
                .get(format!("{base}/status"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let p = s["plans"]
                .as_array()?
                .iter()
                .find(|p| p["plan"] == "kept")?
                .clone();
            (p["owner"] == "dc2" && !p["last_reason"].as_str()?.is_empty()).then_some(())
        },
    )
    .await?;
    d.shutdown().await;
    sims.stop().await;
    Ok(())
}
