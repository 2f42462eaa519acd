//! Many plans on one orchestrator: every plan is checked every couple of intervals, and none
//! is "left alone" while the leader holds its lease (the engine used to decide plans one after
//! another on one lease reading, so plans late in a tick starved, always the same ones).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use qfence_core::{BindingKey, Millis, Observed};
use qfence_lab::fortios::{self, FortiSim, FortiState, Vip};
use qfence_lab::lab::{PveVm, hex_sha256, pve_state};
use qfence_lab::proxmox::{self, PveHandle, VmStatus};
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use qfence_lab::{LabTls, TlsIdentity};
use qfence_model::PlanId;
use qfence_server::events::EventKind;

use crate::lab::{BMC_PASSWORD, Orchestrator, eventually, phase, site};

const PLANS: usize = 200;
const INTERVAL: Duration = Duration::from_secs(1);

fn loopback() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

fn plan_name(i: usize) -> String {
    format!("p{i:03}")
}

fn vmid(i: usize) -> u32 {
    1000 + u32::try_from(i).expect("few plans")
}

fn bmc(host: &str, power: PowerState) -> BmcState {
    let mut system = System::new(host, "5b7e4f10-0001-4c2a-9d5e-000000000001");
    system.power = power;
    BmcState::new(
        vec![system],
        vec![Account::new("qfence", BMC_PASSWORD, Role::Operator)],
    )
}

/// The lab's simulators with one VM, one replication job and one VIP per plan.
struct ScaledSims {
    bmc1: BmcHandle,
    bmc2: BmcHandle,
    pve1: PveHandle,
    pve2: PveHandle,
    fgt: FortiSim,
    fgt_pin: String,
}

impl ScaledSims {
    async fn start(n: usize) -> Result<Self> {
        let names: Vec<String> = (0..n).map(plan_name).collect();
        let vms: Vec<PveVm<'_>> = names
            .iter()
            .enumerate()
            .map(|(i, name)| PveVm { id: vmid(i), name })
            .collect();
        let sync = Duration::from_secs(2);
        let bmc1 = redfish::start(
            loopback(),
            TlsIdentity::loopback()?,
            bmc("pve-dc1-01", PowerState::On),
        )
        .await?;
        let bmc2 = redfish::start(
            loopback(),
            TlsIdentity::loopback()?,
            bmc("pve-dc2-01", PowerState::Off),
        )
        .await?;
        let pve1 = proxmox::start(
            loopback(),
            TlsIdentity::loopback()?,
            pve_state(
                "pve-dc1",
                "pve-dc1-01",
                &vms,
                VmStatus::Running,
                "pve-dc2-01",
                sync,
            ),
        )
        .await?;
        pve1.attach_power(
            "pve-dc1-01",
            bmc1.power_line("pve-dc1-01").context("power line")?,
        );
        let pve2 = proxmox::start(
            loopback(),
            TlsIdentity::loopback()?,
            pve_state(
                "pve-dc2",
                "pve-dc2-01",
                &vms,
                VmStatus::Stopped,
                "pve-dc1-01",
                sync,
            ),
        )
        .await?;
        let mut forti = FortiState::example();
        let root = forti.vdoms.get_mut("root").context("vdom root")?;
        for i in 0..n {
            root.vips.insert(
                format!("vip-{}", plan_name(i)),
                Vip {
                    extip: format!("198.18.0.{}", i + 1),
                    mappedip: vec![format!("10.1.0.{}", i + 1)],
                    extintf: "port1".into(),
                    enabled: true,
                },
            );
        }
        let tls = LabTls::self_signed(&["127.0.0.1", "localhost"])?;
        let fgt_pin = hex_sha256(&tls.cert_der);
        let fgt = fortios::start(loopback(), Some(tls), forti).await?;
        Ok(Self {
            bmc1,
            bmc2,
            pve1,
            pve2,
            fgt,
            fgt_pin,
        })
    }

    /// `n` plans of the lab's shape over the shared controllers, every controller reachable
    /// from both sites (one orchestrator, at dc1, runs everything).
    fn config_text(&self, n: usize) -> String {
        let mut t = String::from(
            "cluster:\n  name: scale\nsites:\n  dc1: {}\n  dc2: {}\n  witness: {witness: true}\n\
             orchestrators:\n  dc1-a: {site: dc1, address: \"127.0.0.1:7401\"}\n  \
             dc2-a: {site: dc2, address: \"127.0.0.1:7402\"}\n  \
             witness-a: {site: witness, address: \"127.0.0.1:7403\"}\ncontrollers:\n",
        );
        let redfish = "    secret: lab-redfish\n    username: qfence\n";
        let pve = "    secret: lab-proxmox\n    token_id: qfence@pve!fence\n";
        let fgt = "    secret: lab-fortigate\n    vdom: root\n";
        for (name, kind, url, pin, at, other, extra) in [
            (
                "bmc-dc1",
                "redfish",
                self.bmc1.base_url(),
                self.bmc1.fingerprint().to_owned(),
                "dc1",
                "dc2",
                redfish,
            ),
            (
                "bmc-dc2",
                "redfish",
                self.bmc2.base_url(),
                self.bmc2.fingerprint().to_owned(),
                "dc2",
                "dc1",
                redfish,
            ),
            (
                "pve-dc1",
                "proxmox",
                self.pve1.base_url(),
                self.pve1.fingerprint().to_owned(),
                "dc1",
                "dc2",
                pve,
            ),
            (
                "pve-dc2",
                "proxmox",
                self.pve2.base_url(),
                self.pve2.fingerprint().to_owned(),
                "dc2",
                "dc1",
                pve,
            ),
            (
                "fgt-edge",
                "fortigate",
                self.fgt.url(),
                self.fgt_pin.clone(),
                "dc1",
                "dc2",
                fgt,
            ),
        ] {
            let _ = write!(
                t,
                "  {name}:\n    type: {kind}\n    endpoint: {url}\n    site: {at}\n    \
                 reach: [{other}]\n{extra}    timeout_seconds: 2\n    tls: {{pin: \"sha256:{pin}\"}}\n",
            );
        }
        t.push_str("plans:\n");
        for i in 0..n {
            let id = vmid(i);
            let _ = write!(
                t,
                "  {plan}:\n    owner: dc1\n    interval_seconds: {interval}\n    \
                 recovery_after_seconds: 2\n    failover_after_seconds: 6\n    \
                 fence_timeout_seconds: 3\n    instances:\n",
                plan = plan_name(i),
                interval = INTERVAL.as_secs(),
            );
            for s in ["dc1", "dc2"] {
                let _ = write!(
                    t,
                    "      {s}:\n        \
                     - {{controller: bmc-{s}, capability: power.off, resource: pve-{s}-01, role: fence, required: true}}\n        \
                     - {{controller: pve-{s}, capability: vm.stop, resource: pve-{s}-01/{id}, role: fence}}\n        \
                     - {{controller: pve-{s}, capability: replication.lag, resource: {id}-1, role: readiness, params: {{max_age_seconds: 120}}}}\n        \
                     - {{controller: pve-{s}, capability: vm.status, resource: pve-{s}-01/{id}, role: health}}\n        \
                     - {{controller: pve-{s}, capability: vm.start, resource: pve-{s}-01/{id}, role: switchover}}\n"
                );
            }
            let _ = write!(
                t,
                "    service:\n      - {{controller: fgt-edge, capability: vip.own, resource: vip-{plan}, \
                 role: service, params: {{dc1: 10.1.0.{a}, dc2: 10.2.0.{a}}}}}\n",
                plan = plan_name(i),
                a = i + 1,
            );
        }
        t
    }

    async fn stop(mut self) {
        self.fgt.shutdown().await;
        self.pve1.shutdown().await;
        self.pve2.shutdown().await;
        self.bmc1.shutdown().await;
        self.bmc2.shutdown().await;
    }
}

/// The newest observation of any of the plan's bindings.
fn newest_check(o: &Orchestrator, plan: &PlanId) -> Option<Millis> {
    o.engine
        .runtime(plan)
        .observations
        .values()
        .map(|obs| obs.at)
        .max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_200_plans_every_plan_is_checked_every_couple_of_intervals_and_none_is_left_alone()
-> Result<()> {
    let sims = ScaledSims::start(PLANS).await?;
    let o = Orchestrator::start(&sims.config_text(PLANS), true).await?;
    let plans: Vec<PlanId> = (0..PLANS)
        .map(|i| PlanId::new(plan_name(i)).expect("a plan name"))
        .collect();
    let dc1_health = BindingKey::site(&site("dc1"), 3);
    let dc2_fence = BindingKey::site(&site("dc2"), 0);

    phase("every plan reads dc1 healthy and dc2 fenced");
    let ready = || {
        plans
            .iter()
            .filter(|p| {
                let view = o.engine.runtime(p);
                let holds = |k: &BindingKey| {
                    view.observations
                        .get(k)
                        .is_some_and(|obs| obs.value == Observed::Holds)
                };
                holds(&dc1_health) && holds(&dc2_fence)
            })
            .count()
    };
    let settled = eventually(Duration::from_secs(90), "every plan checked", || async {
        let n = ready();
        eprintln!("{n} of {PLANS} plans read dc1 healthy and dc2 fenced");
        (n == PLANS).then_some(())
    })
    .await;
    if settled.is_err() {
        for e in o
            .engine
            .events()
            .iter()
            .filter(|e| e.plan.as_deref() == Some("p000"))
            .take(60)
        {
            eprintln!("{:>5} {:<9} {}", e.seq, e.kind.as_str(), e.message);
        }
        for p in plans.iter().take(3) {
            let view = o.engine.runtime(p);
            eprintln!("{p}: {:?}\n  {:?}", view.last_reason, view.observations);
        }
    }
    settled?;

    phase("for four intervals, every plan gets a new check within two intervals plus a timeout");
    // A check takes up to its controller's timeout (2 s) after the decision that asked for it.
    let allowed = INTERVAL * 2 + Duration::from_secs(2);
    let clock = o.engine.clock();
    let mut worst = Duration::ZERO;
    let mut late = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(INTERVAL / 2).await;
        let now = clock.now();
        for p in &plans {
            let age = newest_check(&o, p).map_or(Duration::MAX, |at| now.since(at));
            worst = worst.max(age);
            if age > allowed {
                late.push(format!("{p}: newest check {age:?} old"));
            }
        }
    }
    eprintln!("oldest newest-check seen: {worst:?}");
    assert!(
        late.is_empty(),
        "{} late: {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );

    phase("no plan was left alone for want of a lease while this orchestrator led");
    let starved: Vec<String> = o
        .engine
        .events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Decision && e.message.contains("left alone"))
        .map(|e| e.message)
        .collect();
    assert!(
        starved.is_empty(),
        "{} plans left alone, such as {:?}",
        starved.len(),
        &starved[..starved.len().min(5)]
    );
    assert!(o.node.status().leader.is_some());

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
