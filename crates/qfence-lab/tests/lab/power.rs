//! The host-power hook: a BMC powers a host off, and the Proxmox node that host is goes
//! offline and its VMs stop; the lab's single-node sites lose their whole API.

use std::time::Duration;

use anyhow::Result;
use qfence_lab::TlsIdentity;
use qfence_lab::proxmox::{self, PveState, ReplicationJob, Vm, VmStatus};
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, Role, System};
use reqwest::{Client, Method, StatusCode};
use serde_json::json;

use crate::common::{call, chain, client, eventually, loopback, phase, req};
use crate::proxmox::{ROOT_TOKEN, api, pve, state};

async fn bmc_for(host: &str) -> Result<(BmcHandle, Client)> {
    let tls = TlsIdentity::loopback()?;
    let pem = tls.cert_pem().to_owned();
    let state = BmcState::new(
        vec![System::new(host, "5b7e4f10-0001-4c2a-9d5e-000000000001")],
        vec![Account::new("fencer", "fencer-pw", Role::Operator)],
    );
    Ok((redfish::start(loopback(), tls, state).await?, client(&pem)))
}

async fn press(c: &Client, h: &BmcHandle, host: &str, reset_type: &str) -> Result<()> {
    let path = format!("/redfish/v1/Systems/{host}/Actions/ComputerSystem.Reset");
    let r = call(
        req(c, Method::POST, &h.base_url(), &path)
            .basic_auth("fencer", Some("fencer-pw"))
            .json(&json!({"ResetType": reset_type})),
    )
    .await?;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    Ok(())
}

#[tokio::test]
async fn powering_a_host_off_takes_its_node_offline_and_stops_its_vms() -> Result<()> {
    let (bmc, bc) = bmc_for("pve-b").await?;
    let (p, pc) = pve(state()).await?;
    p.attach_power("pve-b", bmc.power_line("pve-b").expect("line"));

    phase("the BMC powers pve-b off");
    press(&bc, &bmc, "pve-b", "ForceOff").await?;
    eventually(Duration::from_secs(10), "pve-b offline", || async {
        let s = api(&pc, &p, Method::GET, "/cluster/status", ROOT_TOKEN).await?;
        let node = s.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "pve-b")
            .cloned();
        Ok(node.filter(|n| n["online"] == 0).map(|_| ()))
    })
    .await?;
    let current = api(
        &pc,
        &p,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(current.status.as_u16(), 595);
    assert_eq!(p.snapshot().vm(101).unwrap().status, VmStatus::Stopped);

    phase("power back: the node is online, and the VM stays stopped (it died with its host)");
    press(&bc, &bmc, "pve-b", "On").await?;
    eventually(Duration::from_secs(10), "pve-b online", || async {
        let r = api(
            &pc,
            &p,
            Method::GET,
            "/nodes/pve-b/qemu/101/status/current",
            ROOT_TOKEN,
        )
        .await?;
        Ok((r.status == StatusCode::OK).then_some(r))
    })
    .await
    .map(|r| assert_eq!(r.body["data"]["status"], "stopped"))?;
    p.shutdown().await;
    bmc.shutdown().await;
    Ok(())
}

/// The lab's shape: each site's cluster is one node that also answers the API, and VM 101
/// replicates from pve-dc1-01 to pve-dc2-01 (in the other cluster).
#[tokio::test]
async fn the_lab_shape_fencing_dc1_darkens_its_api_and_breaks_replication() -> Result<()> {
    let (bmc1, bc1) = bmc_for("pve-dc1-01").await?;
    let (bmc2, bc2) = bmc_for("pve-dc2-01").await?;
    let mut dc1 = PveState::single_node("pve-dc1", "pve-dc1-01", "secret");
    dc1.tokens = state().tokens;
    dc1.vms
        .push(Vm::new(101, "erp-db", "pve-dc1-01", VmStatus::Running));
    dc1.remote_nodes.insert("pve-dc2-01".into(), true);
    dc1.replication.push(ReplicationJob::new(
        "101-1",
        101,
        "pve-dc2-01",
        Duration::from_millis(200),
    ));
    let mut dc2 = PveState::single_node("pve-dc2", "pve-dc2-01", "secret");
    dc2.tokens = state().tokens;
    dc2.vms
        .push(Vm::new(101, "erp-db", "pve-dc2-01", VmStatus::Stopped));
    let (p1, pc1) = pve(dc1).await?;
    let (p2, pc2) = pve(dc2).await?;
    p1.attach_power("pve-dc1-01", bmc1.power_line("pve-dc1-01").unwrap());
    p1.attach_power("pve-dc2-01", bmc2.power_line("pve-dc2-01").unwrap());
    p2.attach_power("pve-dc2-01", bmc2.power_line("pve-dc2-01").unwrap());

    phase("replication runs while both hosts are up");
    eventually(Duration::from_secs(10), "a sync", || async {
        let r = api(
            &pc1,
            &p1,
            Method::GET,
            "/nodes/pve-dc1-01/replication/101-1/status",
            ROOT_TOKEN,
        )
        .await?;
        Ok((r.body["data"]["last_sync"].as_u64().unwrap_or(0) > 0).then_some(()))
    })
    .await?;

    phase("dc2's host loses power: dc1 sees replication fail");
    press(&bc2, &bmc2, "pve-dc2-01", "ForceOff").await?;
    eventually(Duration::from_secs(10), "a failed sync", || async {
        let r = api(
            &pc1,
            &p1,
            Method::GET,
            "/nodes/pve-dc1-01/replication/101-1/status",
            ROOT_TOKEN,
        )
        .await?;
        Ok((r.body["data"]["fail_count"].as_u64().unwrap_or(0) > 0).then_some(()))
    })
    .await?;
    assert!(
        pc2.get(format!("{}/api2/json/version", p2.base_url()))
            .send()
            .await
            .is_err()
    );
    press(&bc2, &bmc2, "pve-dc2-01", "On").await?;

    phase("dc1's host is fenced: its API refuses connections; the VM is stopped");
    press(&bc1, &bmc1, "pve-dc1-01", "ForceOff").await?;
    eventually(Duration::from_secs(10), "dc1 API dark", || async {
        match pc1
            .get(format!("{}/api2/json/version", p1.base_url()))
            .send()
            .await
        {
            Err(e) => Ok(Some(chain(&e))),
            Ok(_) => Ok(None),
        }
    })
    .await?;
    assert_eq!(p1.snapshot().vm(101).unwrap().status, VmStatus::Stopped);

    phase("dc2 is back and answers; dc1 returns fenced: API up, VM 101 still stopped");
    let v = api(&pc2, &p2, Method::GET, "/version", ROOT_TOKEN).await?;
    assert_eq!(v.status, StatusCode::OK);
    press(&bc1, &bmc1, "pve-dc1-01", "On").await?;
    let current = eventually(Duration::from_secs(10), "dc1 API back", || async {
        match api(
            &pc1,
            &p1,
            Method::GET,
            "/nodes/pve-dc1-01/qemu/101/status/current",
            ROOT_TOKEN,
        )
        .await
        {
            Ok(r) if r.status == StatusCode::OK => Ok(Some(r)),
            _ => Ok(None),
        }
    })
    .await?;
    assert_eq!(current.body["data"]["status"], "stopped");
    for h in [p1, p2] {
        h.shutdown().await;
    }
    bmc1.shutdown().await;
    bmc2.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_bad_initial_state_is_refused() -> Result<()> {
    let mut s = PveState::single_node("c", "n1", "pw");
    s.vms.push(Vm::new(101, "x", "nowhere", VmStatus::Running));
    let error = proxmox::start(loopback(), TlsIdentity::loopback()?, s)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown node \"nowhere\""),
        "{error}"
    );
    Ok(())
}
