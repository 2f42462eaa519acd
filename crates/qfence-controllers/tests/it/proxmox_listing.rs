//! The Proxmox VE driver reads VMs through their node's listing (`GET /nodes/{node}/qemu
//! ?full=1`), shared by the checks that wait for it, against the project's PVE simulator,
//! which counts the listings and single-VM reads it answers.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use qfence_controllers::{Driver, Target};
use qfence_lab::proxmox::{PveState, Vm, VmStatus};
use qfence_model::SiteId;

use crate::proxmox_replication::{ctx, driver, sim, token};

fn phase(what: &str) {
    eprintln!("--- {what}");
}

fn vm_target(capability: &str, vmid: u32) -> Target {
    Target {
        capability: capability.to_owned(),
        resource: format!("pve-dc1-01/{vmid}"),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    }
}

fn node_with(vms: u32) -> PveState {
    let mut s = PveState::single_node("pve-dc1", "pve-dc1-01", "secret");
    s.tokens.push(token());
    for i in 0..vms {
        s.vms.push(Vm::new(
            1000 + i,
            &format!("vm{i}"),
            "pve-dc1-01",
            VmStatus::Running,
        ));
    }
    s
}

#[tokio::test]
async fn checks_of_many_vms_share_a_few_listings_of_their_node() {
    let pve = sim(node_with(200)).await;
    let d = driver(&pve, "pve-dc1", "dc1");

    phase("200 VMs' health read at once: every reading right, from a handful of listings");
    let c = ctx();
    let checks = (0..200).map(|i| {
        let t = vm_target("vm.status", 1000 + i);
        let d = &d;
        let c = &c;
        async move { d.check(c, &t).await }
    });
    let readings = futures_util::future::join_all(checks).await;
    for (i, r) in readings.iter().enumerate() {
        let r = r.as_ref().unwrap();
        assert!(r.holds, "VM {}: {r:?}", 1000 + i);
        assert!(
            r.detail.contains("status=running qmpstatus=running"),
            "{r:?}"
        );
    }
    let listings = pve.reads().listings.load(Ordering::Relaxed);
    let singles = pve.reads().status_current.load(Ordering::Relaxed);
    assert_eq!(singles, 0, "no VM was asked alone");
    assert!(
        (1..=10).contains(&listings),
        "200 concurrent checks took {listings} listings"
    );

    phase("a check that begins after a VM stopped reads it stopped (no older listing is used)");
    pve.update(|s| {
        let vm = s.vms.iter_mut().find(|v| v.vmid == 1007).unwrap();
        vm.status = VmStatus::Stopped;
    });
    let stopped = d.check(&c, &vm_target("vm.stop", 1007)).await.unwrap();
    assert!(
        stopped.holds && stopped.detail.contains("status=stopped"),
        "{stopped:?}"
    );
    let health = d.check(&c, &vm_target("vm.status", 1007)).await.unwrap();
    assert!(!health.holds, "{health:?}");

    phase("a VM not in the listing is asked alone, which says why it is not there");
    let missing = d.check(&c, &vm_target("vm.status", 99)).await.unwrap_err();
    assert!(missing.message.contains("99"), "{missing}");
    assert_eq!(pve.reads().status_current.load(Ordering::Relaxed), 1);
    pve.shutdown().await;
}
