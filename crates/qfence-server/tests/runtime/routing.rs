//! Registration checks are routed like every controller call (issue 4, item 3): they run where
//! a fence would, and the report says which orchestrator ran them.

use std::time::Duration;

use anyhow::Result;
use qfence_model::ControllerId;
use qfence_runtime::RuntimeBackend;
use qfence_runtime::{Access, Caller};
use qfence_runtime::{Backend, BackendError};

use crate::lab::{self, Orchestrator, Sims, eventually, phase};

fn controller(name: &str) -> ControllerId {
    ControllerId::new(name).expect("a controller name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_checks_run_at_an_orchestrator_allowed_to_call_the_controller() -> Result<()> {
    let sims = Sims::start().await?;
    // examples/lab.yaml as it is: pve-dc2 (site dc2, no reach) may only be called from dc2;
    // bmc-dc1 (site dc1, reach dc2) from dc1 or dc2.
    let text = sims.config_text_for(false);
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let dc1 = Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, true).await?;
    let seed = dc1.node.member().address.clone();
    let dc2 = Orchestrator::start_as(&text, "dc2-a", "dc2", &ca, Some(&seed), true).await?;
    assert_eq!(
        dc1.node.leader().map(|l| l.to_string()).as_deref(),
        Some("dc1-a")
    );
    let at_dc1 = RuntimeBackend::new(&dc1.engine, lab::secrets());
    let at_dc2 = RuntimeBackend::new(&dc2.engine, lab::secrets());
    let caller = Caller {
        name: "alice".into(),
        access: Access::Operator,
    };

    phase("dc1-a (leader, not allowed) tests pve-dc2: the leader forwards it to dc2-a");
    let report = eventually(
        Duration::from_secs(20),
        "a registration report for pve-dc2",
        || async {
            at_dc1
                .test_controller(&caller, &controller("pve-dc2"))
                .await
                .ok()
        },
    )
    .await?;
    assert!(
        report
            .message
            .starts_with("Run by dc2-a (forwarded by the leader dc1-a to dc2-a)"),
        "{}",
        report.message
    );
    assert!(
        report.reachable,
        "dc2-a reaches pve-dc2: {}",
        report.message
    );
    assert!(
        !report.grades.is_empty(),
        "graded at dc2-a: {}",
        report.message
    );
    assert!(
        dc1.engine
            .events()
            .iter()
            .any(|e| e.message == "Tested controller pve-dc2 at dc2-a"),
        "the event log says where it ran"
    );

    phase("dc2-a (follower, in bmc-dc1's reach) tests bmc-dc1: it runs it itself");
    let report = at_dc2
        .test_controller(&caller, &controller("bmc-dc1"))
        .await?;
    assert!(
        report
            .message
            .starts_with("Run by dc2-a (here: this site may call it)"),
        "{}",
        report.message
    );
    assert!(report.reachable, "{}", report.message);

    phase("dc2-a (follower, not allowed) tests pve-dc1: it names the leader, runs nothing");
    match at_dc2
        .test_controller(&caller, &controller("pve-dc1"))
        .await
    {
        Err(BackendError::NotLeader { leader: Some(l) }) => {
            assert_eq!(l.leader.as_deref(), Some("dc1-a"));
        }
        other => panic!("expected not_leader naming dc1-a, got {other:?}"),
    }

    phase(
        "the same Proxmox cluster registered again: the forwarded test is told who is registered",
    );
    // localhost, not 127.0.0.1: another endpoint, so only the identity can tell; site dc2
    // without reach, so the leader forwards the check to dc2-a with the identities.
    let api = crate::api_plans::Http::over(&dc1);
    let spec = serde_json::json!({"type": "proxmox",
        "endpoint": sims.pve2.base_url().replace("127.0.0.1", "localhost"), "site": "dc2",
        "secret": "lab-proxmox", "token_id": "qfence@pve!fence", "timeout_seconds": 2,
        "tls": {"pin": format!("sha256:{}", sims.pve2.fingerprint())}});
    let (st, body) = api
        .post(
            "/api/v1/controllers",
            serde_json::json!({"name": "pve-dc2-again", "spec": spec}),
        )
        .await;
    assert_eq!(st, axum::http::StatusCode::CREATED, "{body}");
    let again = eventually(Duration::from_secs(20), "pve-dc2-again tested", || async {
        at_dc1
            .test_controller(&caller, &controller("pve-dc2-again"))
            .await
            .ok()
    })
    .await?;
    assert!(
        again
            .message
            .contains("forwarded by the leader dc1-a to dc2-a"),
        "{}",
        again.message
    );
    assert!(
        again
            .warnings
            .iter()
            .any(|w| w.contains("controller pve-dc2 has the same identity")),
        "{:?}",
        again.warnings
    );

    phase("with dc2-a gone, pve-dc2 cannot be tested, and dc1-a does not test it itself");
    dc2.shutdown().await;
    let answer = at_dc1
        .test_controller(&caller, &controller("pve-dc2"))
        .await;
    assert!(
        matches!(
            answer,
            Err(BackendError::Unavailable(_) | BackendError::NotLeader { .. })
        ),
        "{answer:?}"
    );

    dc1.shutdown().await;
    sims.stop().await;
    Ok(())
}
