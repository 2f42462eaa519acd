//! The Proxmox VE driver reads VMs and replication jobs through their node's listings
//! (`GET /nodes/{node}/qemu?full=1`, `GET /nodes/{node}/replication`), shared by the checks
//! that wait for them, against the project's PVE simulator, which counts the listings and
//! single reads it answers.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use qfence_controllers::{Driver, Target};
use qfence_lab::proxmox::{PveState, ReplicationJob, Vm, VmStatus};
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

#[tokio::test]
async fn replication_checks_of_many_jobs_share_their_nodes_listing() {
    let mut state = node_with(100);
    state
        .nodes
        .push(qfence_lab::proxmox::Node::new("pve-dc2-01", 2, "10.2.0.1"));
    for i in 0..100 {
        state.replication.push(ReplicationJob::new(
            &format!("{}-1", 1000 + i),
            1000 + i,
            "pve-dc2-01",
            std::time::Duration::from_millis(200),
        ));
    }
    let pve = sim(state).await;
    let d = driver(&pve, "pve-dc1", "dc1");
    // Every job synced once (the simulator syncs them in the background).
    let mut waited = 0;
    while pve
        .snapshot()
        .replication
        .iter()
        .any(|j| j.status.last_sync == 0)
    {
        assert!(waited < 200, "the jobs never synced");
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    phase("100 jobs' readiness read at once: right, from a few listings and no job read alone");
    let c = ctx();
    let checks = (0..100).map(|i| {
        let t = Target {
            capability: "replication.lag".to_owned(),
            resource: format!("{}-1", 1000 + i),
            params: BTreeMap::from([("max_age_seconds".to_owned(), "60".to_owned())]),
            site: SiteId::new("dc1").unwrap(),
        };
        let d = &d;
        let c = &c;
        async move { d.check(c, &t).await }
    });
    for (i, r) in futures_util::future::join_all(checks)
        .await
        .into_iter()
        .enumerate()
    {
        let r = r.unwrap();
        assert!(r.holds, "job {}-1: {r:?}", 1000 + i);
        assert!(
            r.detail
                .starts_with(&format!("job {}-1: last sync", 1000 + i)),
            "{r:?}"
        );
    }
    let reads = pve.reads();
    assert_eq!(
        reads.job_status.load(Ordering::Relaxed),
        0,
        "no job was read alone"
    );
    let listings = reads.job_listings.load(Ordering::Relaxed);
    assert!(
        (1..=10).contains(&listings),
        "100 checks took {listings} listings"
    );

    phase("a job the node does not list is asked alone, which says why");
    let t = Target {
        capability: "replication.lag".to_owned(),
        resource: "1000-9".to_owned(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    };
    let e = d.check(&c, &t).await.unwrap_err();
    assert!(e.message.contains("1000-9"), "{e}");
    // Once through the remembered node, once more after listing where guests live afresh
    // (the guest might have moved).
    assert_eq!(reads.job_status.load(Ordering::Relaxed), 2);
    pve.shutdown().await;
}

#[tokio::test]
async fn a_listing_runs_to_its_end_when_the_check_that_started_it_gives_up() {
    let pve = sim(node_with(20)).await;
    let d = driver(&pve, "pve-dc1", "dc1");
    d.check(&ctx(), &vm_target("vm.status", 1000))
        .await
        .unwrap();
    let listed = || pve.reads().listings.load(Ordering::Relaxed);
    assert_eq!(listed(), 1);

    phase("every answer takes 600 ms; a check with 300 ms to live gives up");
    pve.faults()
        .set_latency(std::time::Duration::from_millis(600));
    let short = crate::proxmox_replication::ctx_for(std::time::Duration::from_millis(300));
    let e = d
        .check(&short, &vm_target("vm.status", 1001))
        .await
        .unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Timeout, "{e}");

    phase("the listing it started was not dropped with it: the simulator answers it");
    // (The simulator counts a request after its latency: a dropped one is never counted.)
    let mut waited = 0;
    while listed() < 2 {
        assert!(
            waited < 100,
            "the abandoned check's listing never reached its end"
        );
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(listed(), 2);

    phase("a check with time enough reads through the next listing");
    let r = d
        .check(&ctx(), &vm_target("vm.status", 1002))
        .await
        .unwrap();
    assert!(r.holds, "{r:?}");
    assert_eq!(listed(), 3);
    pve.faults().set_latency(std::time::Duration::ZERO);
    pve.shutdown().await;
}
