//! The Proxmox VE driver's `replication.lag` readiness against the project's PVE simulator
//! (`qfence_lab::proxmox`, in-process on 127.0.0.1, certificate pinned), which models
//! replication as PVE does: `last_sync`, `fail_count`, `error`, read only through the
//! guest's node, the link-down and flapping faults, and host power from a BMC.
//! (fakepve, the independent emulator used in `proxmox.rs`, serves static replication data.)
//!
//! Where the readiness of the dc2 copy is read, and why it still answers once dc1 is gone:
//!
//! - PVE storage replication (`pvesr`) works inside one cluster, and a job's state file lives
//!   on the guest's (source) node only; every node's API proxies `/nodes/{source}/...` there.
//!   With one cluster stretched over dc1 and dc2 (`pve-dc2` = pve-dc2-01's API), the dc2
//!   binding `pve-dc2 / replication.lag 101-1` asks pve-dc2-01, which proxies to pve-dc1-01.
//!   Once dc1's host is off that is 595, and the driver answers from the sample it cached
//!   while dc1 answered, ageing it from `last_sync`
//!   (`the_lab_story_in_one_stretched_cluster_...`).
//! - examples/lab.yaml's lab runs two single-node clusters (`pve-dc1`, `pve-dc2`; the job
//!   targets pve-dc2-01 as a node outside its cluster). There the same binding asks cluster
//!   pve-dc2, which has no job 101-1: it is an error (UNKNOWN, never ready) before and after
//!   dc1's loss, and `check_binding` says so. The job can only be read through `pve-dc1`,
//!   whose API dies with dc1's host: a `pve-dc1` binding run from dc2 (`reach: [dc2]`)
//!   answers from its cache (`the_lab_as_configured_...`). The lab's configuration, not the
//!   driver, has to change for dc2's readiness to be known.
//!
//! In both, the cache is in the driver instance of the orchestrator that reads: it is warm
//! only if that orchestrator read the job while the source answered.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qfence_controllers::driver::Build as _;
use qfence_controllers::proxmox::{self, ProxmoxDriver};
use qfence_controllers::{CallContext, Driver, DriverError, ErrorKind, Reading, Target};
use qfence_lab::TlsIdentity;
use qfence_lab::faults::{Cut, ErrorStorm};
use qfence_lab::proxmox::{
    ApiToken, Flapping, Node, PveHandle, PveState, ReplicationJob, Vm, VmStatus,
};
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use qfence_model::config::{ControllerConfig, ControllerKind, ProxmoxAuth, TlsTrust};
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use secrecy::SecretString;

const TOKEN_SECRET: &str = "11111111-2222-3333-4444-555555555555";
const JOB: &str = "101-1";
/// Sim replication interval: fast tests.
const INTERVAL: Duration = Duration::from_millis(200);

fn phase(what: &str) {
    eprintln!("--- {what}");
}

pub(crate) fn token() -> ApiToken {
    ApiToken {
        userid: "root@pam".into(),
        name: "qfence".into(),
        secret: TOKEN_SECRET.into(),
        privsep: false,
        acl: vec![],
    }
}

/// One cluster `pve` stretched over both sites: the API answered by pve-dc2-01, VM 101 on
/// pve-dc1-01, job 101-1 replicating it to pve-dc2-01.
fn stretched() -> PveState {
    let mut s = PveState::single_node("pve", "pve-dc2-01", "secret");
    s.nodes.push(Node::new("pve-dc1-01", 2, "10.1.0.1"));
    s.tokens.push(token());
    s.vms
        .push(Vm::new(101, "erp-db", "pve-dc1-01", VmStatus::Running));
    s.replication
        .push(ReplicationJob::new(JOB, 101, "pve-dc2-01", INTERVAL));
    s
}

/// The lab's dc1 cluster: one node that also answers the API, its job targeting pve-dc2-01
/// of the other cluster.
fn lab_dc1() -> PveState {
    let mut s = PveState::single_node("pve-dc1", "pve-dc1-01", "secret");
    s.tokens.push(token());
    s.vms
        .push(Vm::new(101, "erp-db", "pve-dc1-01", VmStatus::Running));
    s.remote_nodes.insert("pve-dc2-01".into(), true);
    s.replication
        .push(ReplicationJob::new(JOB, 101, "pve-dc2-01", INTERVAL));
    s
}

/// The lab's dc2 cluster: the replica of VM 101, stopped, and no replication job.
fn lab_dc2() -> PveState {
    let mut s = PveState::single_node("pve-dc2", "pve-dc2-01", "secret");
    s.tokens.push(token());
    s.vms
        .push(Vm::new(101, "erp-db", "pve-dc2-01", VmStatus::Stopped));
    s
}

pub(crate) async fn sim(state: PveState) -> PveHandle {
    qfence_lab::proxmox::start(
        "127.0.0.1:0".parse().unwrap(),
        TlsIdentity::loopback().unwrap(),
        state,
    )
    .await
    .unwrap()
}

async fn bmc(host: &str) -> BmcHandle {
    redfish::start(
        "127.0.0.1:0".parse().unwrap(),
        TlsIdentity::loopback().unwrap(),
        BmcState::new(
            vec![System::new(host, "5b7e4f10-0001-4c2a-9d5e-000000000001")],
            vec![Account::new("fencer", "fencer-pw", Role::Operator)],
        ),
    )
    .await
    .unwrap()
}

/// A driver for `h`, its certificate pinned, as controller `id` of `site`.
pub(crate) fn driver(h: &PveHandle, id: &str, site: &str) -> ProxmoxDriver {
    let config = ControllerConfig {
        site: SiteId::new(site).unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::Pin(format!("sha256:{}", h.fingerprint())),
        timeout: Duration::from_secs(5),
        kind: ControllerKind::Proxmox {
            endpoint: h.base_url().parse().unwrap(),
            auth: ProxmoxAuth::Token {
                token_id: "root@pam!qfence".to_owned(),
            },
        },
    };
    proxmox::ProxmoxDriver::build(
        ControllerId::new(id).unwrap(),
        &config,
        Some(SecretString::from(TOKEN_SECRET.to_owned())),
    )
    .unwrap()
}

pub(crate) fn ctx_for(timeout: Duration) -> CallContext {
    CallContext::with_timeout(OrchestratorId::new("dc2-a").unwrap(), timeout)
}

pub(crate) fn ctx() -> CallContext {
    ctx_for(Duration::from_secs(5))
}

/// The dc2 readiness binding of job 101-1 with its limits as params.
fn lag(max_age: &str, max_fail: &str) -> Target {
    Target {
        capability: "replication.lag".to_owned(),
        resource: JOB.to_owned(),
        params: BTreeMap::from([
            ("max_age_seconds".to_owned(), max_age.to_owned()),
            ("max_fail_count".to_owned(), max_fail.to_owned()),
        ]),
        site: SiteId::new("dc2").unwrap(),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The number right after `key` in `detail`.
fn number_after(detail: &str, key: &str) -> u64 {
    let rest = &detail[detail
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} in {detail:?}"))
        + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number after {key:?} in {detail:?}"))
}

/// (age of the last sync, fail count) as the reading states them.
fn figures(r: &Reading) -> (u64, u64) {
    (
        number_after(&r.detail, "last sync "),
        number_after(&r.detail, "fail_count "),
    )
}

async fn first_sync(h: &PveHandle) -> u64 {
    for _ in 0..100 {
        let last = h.snapshot().job(JOB).unwrap().status.last_sync;
        if last > 0 {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {JOB} never synced");
}

async fn check(d: &ProxmoxDriver, t: &Target) -> Result<Reading, DriverError> {
    d.check(&ctx(), t).await
}

/// Reads until `want` accepts a reading, for at most `within`.
async fn read_until(
    d: &ProxmoxDriver,
    t: &Target,
    within: Duration,
    what: &str,
    want: impl Fn(&Reading) -> bool,
) -> Reading {
    let end = tokio::time::Instant::now() + within;
    loop {
        let r = check(d, t).await.unwrap();
        if want(&r) {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: last reading {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_fresh_job_holds_and_names_its_age_and_fail_count() {
    let pve = sim(stretched()).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    first_sync(&pve).await;

    phase("a job syncing every 200 ms holds under max_age_seconds 60, max_fail_count 0");
    let r = check(&d, &lag("60", "0")).await.unwrap();
    assert!(r.holds, "{r:?}");
    let (age, fails) = figures(&r);
    assert!(age <= 2, "{r:?}");
    assert_eq!(fails, 0, "{r:?}");
    assert!(
        r.detail.starts_with("job 101-1: last sync")
            && r.detail.contains("(limit 60)")
            && r.detail.contains("(limit 0)")
            && !r.detail.contains("cached"),
        "{}",
        r.detail
    );
    assert_eq!(r.by.as_str(), "dc2-a");

    phase("the limits come from the binding's params");
    let e = check(&d, &lag("soon", "0")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(e.message.contains("params.max_age_seconds"), "{e}");
    pve.shutdown().await;
}

#[tokio::test]
async fn a_job_whose_link_is_down_ages_past_its_limit_and_stops_holding() {
    let pve = sim(stretched()).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    first_sync(&pve).await;
    let t = lag("1", "100");
    assert!(check(&d, &t).await.unwrap().holds);

    phase("the replication link goes down: syncs stop, last_sync ages");
    pve.update(|s| s.replication[0].link_up = false);
    let stopped_at = pve.snapshot().job(JOB).unwrap().status.last_sync;
    let r = read_until(&d, &t, Duration::from_secs(6), "aged past 1 s", |r| {
        !r.holds
    })
    .await;
    let (age, fails) = figures(&r);
    assert!(age > 1, "{r:?}");
    assert!(fails >= 1, "{r:?}");
    assert!(
        r.detail.contains("(limit 1)") && r.detail.contains("last error: command '/usr/bin/ssh"),
        "the detail says why: {}",
        r.detail
    );
    let last_sync = pve.snapshot().job(JOB).unwrap().status.last_sync;
    assert!(
        last_sync <= stopped_at + 1,
        "no sync while the link is down"
    );
    assert!(age + 1 >= now() - last_sync, "age = now - last_sync: {r:?}");

    phase("the link comes back: a sync, and it holds again");
    pve.update(|s| s.replication[0].link_up = true);
    read_until(&d, &t, Duration::from_secs(8), "holds again", |r| r.holds).await;
    pve.shutdown().await;
}

#[tokio::test]
async fn flapping_replication_does_not_hold_while_fail_count_exceeds_the_limit() {
    let mut state = stretched();
    state.replication[0].interval = Duration::from_millis(100);
    state.replication[0].flapping = Some(Flapping {
        fail: 3,
        succeed: 2,
    });
    let pve = sim(state).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    let t = lag("60", "1");

    phase("fail 3 times, succeed twice, and again: every reading judged by its own figures");
    let (mut held, mut refused, mut highest) = (0, 0, 0);
    let end = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < end {
        let r = check(&d, &t).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        if r.detail.contains("never synced") {
            assert!(!r.holds, "{r:?}");
            continue;
        }
        let (age, fails) = figures(&r);
        assert_eq!(r.holds, fails <= 1 && age <= 60, "{r:?}");
        if r.holds {
            held += 1;
        } else {
            refused += 1;
            assert!(r.detail.contains("last error: command 'zfs recv"), "{r:?}");
        }
        highest = highest.max(fails);
    }
    assert!(highest >= 2, "fail_count rose past the limit");
    assert!(held > 0 && refused > 0, "held {held}, refused {refused}");
    pve.shutdown().await;
}

#[tokio::test]
async fn a_lost_source_node_is_answered_from_the_cache_which_keeps_ageing() {
    let pve = sim(stretched()).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    let t = lag("3", "0");
    first_sync(&pve).await;
    let fresh = check(&d, &t).await.unwrap();
    assert!(fresh.holds && !fresh.detail.contains("cached"), "{fresh:?}");

    phase("pve-dc1-01 loses power: its replication state is 595 through pve-dc2-01");
    pve.set_node_powered("pve-dc1-01", false);
    let last_sync = pve.snapshot().job(JOB).unwrap().status.last_sync;
    let fresh_driver = driver(&pve, "pve-dc2", "dc2");
    let e = check(&fresh_driver, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "no cache: UNKNOWN, {e}");
    assert!(e.message.contains("595"), "{e}");

    let first = check(&d, &t).await.unwrap();
    assert!(
        first.detail.contains("; cached, read at 20")
            && first
                .detail
                .contains("from node pve-dc1-01, which does not answer now"),
        "{}",
        first.detail
    );
    let (age1, _) = figures(&first);
    assert!(age1.abs_diff(now() - last_sync) <= 1, "{first:?}");

    phase("the cached sample ages with the clock and stops holding past max_age");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = check(&d, &t).await.unwrap();
    let (age2, _) = figures(&second);
    assert!(age2 > age1, "{first:?} then {second:?}");
    let end = tokio::time::Instant::now() + Duration::from_secs(6);
    let mut refused = false;
    while tokio::time::Instant::now() < end && !refused {
        let r = check(&d, &t).await.unwrap();
        let (age, _) = figures(&r);
        assert!(r.detail.contains("cached"), "{r:?}");
        assert_eq!(
            r.holds,
            age <= 3,
            "a cached sample holds only while young: {r:?}"
        );
        refused = !r.holds;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused, "the cached sample grew too old to hold");
    pve.shutdown().await;
}

/// Regression: a powered-off host drops packets instead of refusing. The fresh read used to
/// run into the call's deadline and fail (Timeout) although a cached sample was at hand.
#[tokio::test]
async fn a_silent_source_is_answered_from_the_cache_before_the_deadline() {
    let pve = sim(lab_dc1()).await;
    let d = driver(&pve, "pve-dc1", "dc1");
    let t = lag("120", "0");
    first_sync(&pve).await;
    assert!(check(&d, &t).await.unwrap().holds);

    phase("the API stops answering (black hole): the cache answers within the deadline");
    pve.faults().set_unreachable(Some(Cut::Blackhole));
    let started = tokio::time::Instant::now();
    let r = d.check(&ctx_for(Duration::from_secs(2)), &t).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(r.holds && r.detail.contains("cached, read at"), "{r:?}");

    phase("without a cache the silence is UNKNOWN");
    let cold = driver(&pve, "pve-dc1", "dc1");
    let e = cold
        .check(&ctx_for(Duration::from_millis(800)), &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");

    phase("refused connections too");
    pve.faults().set_unreachable(Some(Cut::Refuse));
    let r = check(&d, &t).await.unwrap();
    assert!(r.holds && r.detail.contains("cached, read at"), "{r:?}");
    pve.shutdown().await;
}

/// Regression: PVE's proxy (AnyEvent::HTTP) answers 596/597 when the node it forwards to
/// breaks off mid-request; they were read as a refusal (Rejected), which skipped the cache.
#[tokio::test]
async fn the_proxys_596_and_597_mean_the_source_does_not_answer() {
    let pve = sim(stretched()).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    let t = lag("120", "0");
    first_sync(&pve).await;
    assert!(check(&d, &t).await.unwrap().holds);
    for status in [595, 596, 597] {
        phase(&format!("every answer is {status}"));
        pve.faults().set_error_storm(Some(ErrorStorm {
            status,
            remaining: None,
        }));
        let r = check(&d, &t).await.unwrap();
        assert!(r.holds && r.detail.contains("cached, read at"), "{r:?}");
        let e = check(&driver(&pve, "pve-dc2", "dc2"), &t)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "no cache: UNKNOWN, {e}");
    }
    pve.shutdown().await;
}

/// The failover's question at dc2, in a PVE cluster stretched over both sites (the only
/// shape in which PVE replicates): dc1's BMC powers pve-dc1-01 off, and the dc2 controller
/// still answers for job 101-1 from what it read while dc1 was up.
#[tokio::test]
async fn the_lab_story_in_one_stretched_cluster_dc2_reads_101_1_after_dc1_is_powered_off() {
    let bmc1 = bmc("pve-dc1-01").await;
    let pve = sim(stretched()).await;
    pve.attach_power("pve-dc1-01", bmc1.power_line("pve-dc1-01").unwrap());
    let pve_dc2 = driver(&pve, "pve-dc2", "dc2");
    let t = lag("120", "0");
    first_sync(&pve).await;

    phase("dc2's orchestrator reads its readiness while dc1 is up");
    let before = check(&pve_dc2, &t).await.unwrap();
    assert!(
        before.holds && !before.detail.contains("cached"),
        "{before:?}"
    );

    phase("dc1's host is powered off through its BMC");
    bmc1.set_power("pve-dc1-01", PowerState::Off);
    for _ in 0..50 {
        if !pve.snapshot().node("pve-dc1-01").unwrap().online() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!pve.snapshot().node("pve-dc1-01").unwrap().online());

    phase("the dc2 copy is ready: last synced seconds ago, read from the cache");
    let after = check(&pve_dc2, &t).await.unwrap();
    assert!(after.holds, "{after:?}");
    assert!(
        after.detail.contains("cached, read at") && after.detail.contains("pve-dc1-01"),
        "{}",
        after.detail
    );
    pve.shutdown().await;
    bmc1.shutdown().await;
}

/// examples/lab.yaml as it stands: two one-node clusters. `pve-dc2 / replication.lag 101-1`
/// asks cluster pve-dc2, which has no such job: UNKNOWN before and after dc1's loss (safe,
/// but dc2's readiness is never known). Only `pve-dc1` knows the job; read from dc2, it
/// answers from its cache once dc1's host (and with it pve-dc1's API) is off.
/// Regression: the first read after the power-off went out on the pooled keep-alive
/// connection, which the dead server had dropped; that error (a Protocol one) skipped the
/// cache. A read is now sent once more on a new connection, which is refused.
#[tokio::test]
async fn the_lab_as_configured_reads_101_1_only_through_pve_dc1() {
    let bmc1 = bmc("pve-dc1-01").await;
    let dc1 = sim(lab_dc1()).await;
    let dc2 = sim(lab_dc2()).await;
    dc1.attach_power("pve-dc1-01", bmc1.power_line("pve-dc1-01").unwrap());
    let pve_dc1 = driver(&dc1, "pve-dc1", "dc1");
    let pve_dc2 = driver(&dc2, "pve-dc2", "dc2");
    let t = lag("120", "0");
    first_sync(&dc1).await;

    phase("pve-dc2 has no job 101-1: an error, never a reading, and check_binding says so");
    let e = check(&pve_dc2, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.message.contains("no such replication job '101-1'"), "{e}");
    let problems = pve_dc2.check_binding(&ctx(), &t).await.unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("replication job 101-1 does not exist")),
        "{problems:?}"
    );

    phase("pve-dc1 reads it while dc1 is up");
    assert!(check(&pve_dc1, &t).await.unwrap().holds);

    phase("dc1's host is powered off: pve-dc1's API goes dark");
    bmc1.set_power("pve-dc1-01", PowerState::Off);
    let r = read_until(
        &pve_dc1,
        &t,
        Duration::from_secs(5),
        "answered from the cache",
        |r| r.detail.contains("cached, read at"),
    )
    .await;
    assert!(r.holds, "{r:?}");
    let e = check(&pve_dc2, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "still no job in pve-dc2: {e}");
    dc1.shutdown().await;
    dc2.shutdown().await;
    bmc1.shutdown().await;
}

#[tokio::test]
async fn a_guest_that_moved_is_found_again_through_its_new_node() {
    let mut state = stretched();
    state.nodes.push(Node::new("pve-dc1-02", 3, "10.1.0.2"));
    let pve = sim(state).await;
    let d = driver(&pve, "pve-dc2", "dc2");
    first_sync(&pve).await;

    phase("the first check lists where guests live and reads 101-1 through pve-dc1-01");
    let r = check(&d, &lag("60", "0")).await.unwrap();
    assert!(r.holds, "{r:?}");

    phase("VM 101 moves to pve-dc1-02: the remembered node no longer has the job's state");
    pve.update(|s| {
        let vm = s.vms.iter_mut().find(|v| v.vmid == 101).unwrap();
        vm.node = "pve-dc1-02".into();
    });
    phase("its refusal makes the driver list again, within the same check");
    let r = check(&d, &lag("60", "0")).await.unwrap();
    assert!(r.holds, "{r:?}");

    phase("the source node down: the sample comes from the cache, naming the new node");
    pve.set_node_powered("pve-dc1-02", false);
    let r = check(&d, &lag("60", "0")).await.unwrap();
    assert!(r.detail.contains("from node pve-dc1-02"), "{r:?}");
    pve.shutdown().await;
}
