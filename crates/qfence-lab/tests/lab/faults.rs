//! Connection and HTTP faults: unreachable (refused or black-holed, for everyone or for one
//! source address), the wrong certificate, latency, 5xx storms, and shutdown.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::Result;
use qfence_lab::TlsIdentity;
use qfence_lab::faults::{Cut, ErrorStorm};
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, Role, System};
use reqwest::{Client, Method, StatusCode};

use crate::common::{
    call, chain, client, inspecting_client, loopback, peer_fingerprint, phase, req,
};
use crate::proxmox::{ROOT_TOKEN, api, pve, state};

async fn bmc() -> Result<(BmcHandle, Client)> {
    let tls = TlsIdentity::loopback()?;
    let pem = tls.cert_pem().to_owned();
    let state = BmcState::new(
        vec![System::new(
            "pve-dc1-01",
            "5b7e4f10-0001-4c2a-9d5e-000000000001",
        )],
        vec![Account::new("fencer", "fencer-pw", Role::Operator)],
    );
    let handle = redfish::start(loopback(), tls, state).await?;
    Ok((handle, client(&pem)))
}

fn url(h: &BmcHandle, ip: Ipv4Addr, path: &str) -> String {
    format!("https://{ip}:{}{path}", h.addr().port())
}

async fn systems_status(c: &Client, h: &BmcHandle) -> Result<StatusCode, reqwest::Error> {
    let r = c
        .get(url(h, Ipv4Addr::LOCALHOST, "/redfish/v1/Systems"))
        .basic_auth("fencer", Some("fencer-pw"))
        .send()
        .await?;
    Ok(r.status())
}

#[tokio::test]
async fn an_unreachable_simulator_refuses_even_pooled_connections_until_healed() -> Result<()> {
    let (h, c) = bmc().await?;
    assert_eq!(systems_status(&c, &h).await?, StatusCode::OK);

    phase("refuse: the next request on the same client fails quickly");
    h.faults().set_unreachable(Some(Cut::Refuse));
    let started = std::time::Instant::now();
    let error = systems_status(&c, &h)
        .await
        .expect_err("must fail while unreachable");
    assert!(
        !error.is_timeout(),
        "refused, not timed out: {}",
        chain(&error)
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    phase("healed: it answers again");
    h.faults().set_unreachable(None);
    assert_eq!(systems_status(&c, &h).await?, StatusCode::OK);

    phase("black hole: the client waits for its own deadline");
    h.faults().set_unreachable(Some(Cut::Blackhole));
    let short = inspecting_client(None, Duration::from_millis(400));
    let error = short
        .get(url(&h, Ipv4Addr::LOCALHOST, "/redfish/v1"))
        .send()
        .await
        .expect_err("must time out");
    assert!(error.is_timeout(), "{}", chain(&error));
    h.faults().clear();
    assert_eq!(systems_status(&c, &h).await?, StatusCode::OK);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_cut_peer_is_unreachable_while_other_sources_still_get_through() -> Result<()> {
    let (h, _) = bmc().await?;
    let site2 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let from_site2 = inspecting_client(Some(site2), Duration::from_secs(2));
    let from_site1 = inspecting_client(
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        Duration::from_secs(2),
    );
    let root = url(&h, Ipv4Addr::LOCALHOST, "/redfish/v1");
    assert_eq!(from_site2.get(&root).send().await?.status(), StatusCode::OK);

    h.faults().cut_peer(site2, Cut::Refuse);
    assert!(
        from_site2.get(&root).send().await.is_err(),
        "cut off from 127.0.0.2"
    );
    assert_eq!(from_site1.get(&root).send().await?.status(), StatusCode::OK);

    h.faults().restore_peer(site2);
    assert_eq!(from_site2.get(&root).send().await?.status(), StatusCode::OK);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_wrong_certificate_fault_serves_another_certificate() -> Result<()> {
    let (h, pinned) = bmc().await?;
    let inspect = inspecting_client(None, Duration::from_secs(2));
    let root = url(&h, Ipv4Addr::LOCALHOST, "/redfish/v1");

    phase("normally the served certificate is the published fingerprint");
    let served = inspect.get(&root).send().await?;
    assert_eq!(peer_fingerprint(&served).as_deref(), Some(h.fingerprint()));
    assert_eq!(h.fingerprint().len(), 64);
    assert!(
        h.fingerprint()
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(pinned.get(&root).send().await?.status(), StatusCode::OK);

    phase("with the fault, the pooled connection breaks and a new one meets the impostor");
    h.faults().set_wrong_certificate(true);
    let cut = pinned
        .get(&root)
        .send()
        .await
        .expect_err("pooled connection cut");
    assert!(!chain(&cut).is_empty());
    let error = pinned
        .get(&root)
        .send()
        .await
        .expect_err("impostor certificate");
    assert!(
        chain(&error).to_lowercase().contains("certificate"),
        "{}",
        chain(&error)
    );
    let impostor = inspecting_client(None, Duration::from_secs(2))
        .get(&root)
        .send()
        .await?;
    let seen = peer_fingerprint(&impostor).unwrap();
    assert_ne!(seen, h.fingerprint());

    phase("healed: the real certificate again");
    h.faults().set_wrong_certificate(false);
    assert_eq!(pinned.get(&root).send().await?.status(), StatusCode::OK);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn latency_and_error_storms_hit_every_request_in_the_protocol_s_own_form() -> Result<()> {
    let (h, c) = bmc().await?;

    phase("latency: a client with a shorter deadline times out");
    h.faults().set_latency(Duration::from_millis(600));
    let short = inspecting_client(None, Duration::from_millis(300));
    let error = short
        .get(url(&h, Ipv4Addr::LOCALHOST, "/redfish/v1"))
        .send()
        .await
        .expect_err("too slow");
    assert!(error.is_timeout());
    h.faults().set_latency(Duration::ZERO);

    // The timed-out request is still waiting out its latency on the server; let it pass
    // before the storm, or it would take one of the storm's answers.
    tokio::time::sleep(Duration::from_millis(900)).await;

    phase("a storm of two 503s, in Redfish error form, then normal answers");
    h.faults().set_error_storm(Some(ErrorStorm {
        status: 503,
        remaining: Some(2),
    }));
    for _ in 0..2 {
        let r = call(
            req(&c, Method::GET, &h.base_url(), "/redfish/v1/Systems")
                .basic_auth("fencer", Some("fencer-pw")),
        )
        .await?;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.body["error"]["@Message.ExtendedInfo"].is_array());
    }
    assert_eq!(systems_status(&c, &h).await?, StatusCode::OK);
    assert_eq!(
        h.faults().snapshot().error_storm,
        None,
        "the storm has blown over"
    );

    phase("the same storm on Proxmox uses PVE's envelope");
    let (p, pc) = pve(state()).await?;
    p.faults().set_error_storm(Some(ErrorStorm {
        status: 500,
        remaining: None,
    }));
    for _ in 0..3 {
        let r = api(&pc, &p, Method::GET, "/version", ROOT_TOKEN).await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.body["data"], serde_json::Value::Null);
        assert!(r.body["message"].is_string());
    }
    p.faults().set_error_storm(None);
    assert_eq!(
        api(&pc, &p, Method::GET, "/version", ROOT_TOKEN)
            .await?
            .status,
        StatusCode::OK
    );
    p.shutdown().await;
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_listening() -> Result<()> {
    let tls = TlsIdentity::loopback()?;
    let pem = tls.cert_pem().to_owned();
    let h = redfish::start(loopback(), tls, BmcState::new(vec![], vec![])).await?;
    let base = h.base_url();
    let c = client(&pem);
    assert_eq!(
        c.get(format!("{base}/redfish/v1")).send().await?.status(),
        StatusCode::OK
    );
    h.shutdown().await;
    let error = client(&pem)
        .get(format!("{base}/redfish/v1"))
        .send()
        .await
        .expect_err("stopped");
    assert!(error.is_connect(), "{}", chain(&error));
    Ok(())
}

#[tokio::test]
async fn a_saved_identity_keeps_its_fingerprint_across_restarts() -> Result<()> {
    let original = TlsIdentity::loopback()?;
    let restored = TlsIdentity::from_pem(original.cert_pem(), original.key_pem())?;
    assert_eq!(restored.fingerprint(), original.fingerprint());
    let h = redfish::start(loopback(), restored, BmcState::new(vec![], vec![])).await?;
    let served = inspecting_client(None, Duration::from_secs(2))
        .get(format!("{}/redfish/v1", h.base_url()))
        .send()
        .await?;
    assert_eq!(
        peer_fingerprint(&served).as_deref(),
        Some(original.fingerprint())
    );
    h.shutdown().await;

    let broken = TlsIdentity::from_pem("not pem", original.key_pem()).unwrap_err();
    assert!(broken.to_string().contains("certificate"), "{broken}");
    Ok(())
}
