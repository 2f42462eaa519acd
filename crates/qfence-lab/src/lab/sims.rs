//! The lab's five simulators and the configuration that points qfence at them.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;

use crate::fortios::{self, FortiSim, FortiState, Vip};
use crate::proxmox::{
    self, Acl, ApiToken, PveHandle, PveState, ReplicationJob, User, Vm, VmStatus,
};
use crate::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use crate::{LabError, LabTls, TlsIdentity};

/// The API token secret of `qfence@pve!fence` on both Proxmox clusters.
pub const PVE_TOKEN: &str = "0b6a7c3e-4d1f-4e2a-9c8b-7f6e5d4c3b2a";
/// The password of the BMCs' `qfence` account (role Operator).
pub const BMC_PASSWORD: &str = "lab-bmc-pw";
/// The FortiGate's REST API key.
pub const FGT_KEY: &str = "admin-key";
/// The VIP the plan moves.
pub const VIP: &str = "vip-erp-db";
/// Where the VIP points while dc1 owns the plan, and while dc2 does.
pub const VIP_DC1: &str = "10.1.1.5";
/// See [`VIP_DC1`].
pub const VIP_DC2: &str = "10.2.1.5";

/// The lab's timings (seconds), chosen so a lost owner fails over well within 30 s on
/// loopback: checks every second, a site silent for 6 s is fenced, each fence has 3 s.
pub const TIMINGS: &str = "    interval_seconds: 1\n    recovery_after_seconds: 2\n    \
                           failover_after_seconds: 6\n    fence_timeout_seconds: 3\n";

/// The simulators of both sites and the edge firewall.
pub struct Sims {
    /// `bmc-dc1`: the BMC of host pve-dc1-01.
    pub bmc1: BmcHandle,
    /// `bmc-dc2`: the BMC of host pve-dc2-01.
    pub bmc2: BmcHandle,
    /// `pve-dc1`: Proxmox VE cluster pve-dc1, running VM 101.
    pub pve1: PveHandle,
    /// `pve-dc2`: Proxmox VE cluster pve-dc2, holding the stopped replica of VM 101.
    pub pve2: PveHandle,
    /// `fgt-edge`: the FortiGate with `vip-erp-db`.
    pub fgt: FortiSim,
    /// SHA-256 of the FortiGate's certificate.
    pub fgt_pin: String,
}

impl std::fmt::Debug for Sims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sims").finish_non_exhaustive()
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// One VM of a [`pve_state`] scenario: its id and name.
#[derive(Debug, Clone, Copy)]
pub struct PveVm<'a> {
    pub id: u32,
    pub name: &'a str,
}

/// The lab's Proxmox VE scenario for cluster `cluster` with one node `node`: the `qfence@pve`
/// user with the roles fencing needs, its API token `fence` ([`PVE_TOKEN`]), the given VMs in
/// state `vm` on `node`, and one replication job per VM to `replica_to` (seen online) every
/// `sync_every`. The lab, the runtime tests and the scale benchmark all start this one.
pub fn pve_state(
    cluster: &str,
    node: &str,
    vms: &[PveVm<'_>],
    vm: VmStatus,
    replica_to: &str,
    sync_every: Duration,
) -> PveState {
    let mut s = PveState::single_node(cluster, node, "root-pw");
    s.users.push(User {
        userid: "qfence@pve".into(),
        password: None,
        acl: vec![Acl::new(
            "/",
            &["VM.Audit", "VM.PowerMgmt", "Sys.Audit", "Datastore.Audit"],
            true,
        )],
    });
    s.tokens.push(ApiToken {
        userid: "qfence@pve".into(),
        name: "fence".into(),
        secret: PVE_TOKEN.into(),
        privsep: false,
        acl: vec![],
    });
    s.remote_nodes.insert(replica_to.into(), true);
    for v in vms {
        s.vms.push(Vm::new(v.id, v.name, node, vm));
        s.replication.push(ReplicationJob::new(
            &format!("{}-1", v.id),
            v.id,
            replica_to,
            sync_every,
        ));
    }
    s
}

/// The secrets the lab's controllers name, with their values: the lab writes them to its
/// secret directory; in-process tests and the scale benchmark look them up from a map.
pub const SECRETS: [(&str, &str); 4] = [
    ("lab-redfish", BMC_PASSWORD),
    ("lab-proxmox", PVE_TOKEN),
    ("lab-fortigate", FGT_KEY),
    ("lab-nova", super::cloud::NOVA_SECRET),
];

/// One plan of a [`Scenario`]: the VM it keeps running (at dc1, its stopped replica at dc2)
/// and the VIP that follows it.
#[derive(Debug, Clone)]
pub struct ScenarioPlan {
    /// The plan's name.
    pub name: String,
    /// The VM's id on both Proxmox clusters (its replication job is `ID-1`).
    pub vm: u32,
    /// The VIP's name on the FortiGate.
    pub vip: String,
    /// The VIP's external address.
    pub extip: String,
    /// Where the VIP points while dc1 owns the plan.
    pub dc1: String,
    /// Where the VIP points while dc2 owns the plan.
    pub dc2: String,
}

/// What the simulators hold: the plans' VMs and VIPs, how often replication syncs, and what
/// powers dc1's host. [`Scenario::lab`] is the demo's erp-db; [`Scenario::scaled`] is N
/// plans of the same shape over the same controllers (the scale tests and benchmark).
#[derive(Debug)]
pub struct Scenario {
    /// The plans, each with its VM and VIP.
    pub plans: Vec<ScenarioPlan>,
    /// How often each VM's replication job syncs.
    pub sync_every: Duration,
    /// dc1's host power, if not bmc-dc1's own power line (another BMC's, such as an IPMI
    /// BMC simulator's): off darkens pve-dc1's API.
    pub dc1_power: Option<watch::Receiver<bool>>,
}

impl Scenario {
    /// The demo's one plan: erp-db keeps VM 101 and moves `vip-erp-db` ([`VIP_DC1`],
    /// [`VIP_DC2`]); one lab "interval" stands for PVE's 15 minutes, so a sync every 2 s keeps
    /// the lag small.
    pub fn lab() -> Self {
        Self {
            plans: vec![ScenarioPlan {
                name: "erp-db".into(),
                vm: 101,
                vip: VIP.into(),
                extip: "192.0.2.20".into(),
                dc1: VIP_DC1.into(),
                dc2: VIP_DC2.into(),
            }],
            sync_every: Duration::from_secs(2),
            dc1_power: None,
        }
    }

    /// `n` plans (up to 60,000): plan `i` is [`scaled_plan_name`]`(i)`, keeps VM 1000+i and
    /// moves `vip-NAME` (198.18.x.y) between 10.1.x.y and 10.2.x.y.
    pub fn scaled(n: usize, sync_every: Duration) -> Self {
        let plans = (0..n)
            .map(|i| {
                let at = |net: &str| format!("{net}.{}.{}", i / 250, i % 250 + 1);
                let name = scaled_plan_name(i);
                ScenarioPlan {
                    vm: 1000 + u32::try_from(i).expect("a plan count below 60000"),
                    vip: format!("vip-{name}"),
                    extip: at("198.18"),
                    dc1: at("10.1"),
                    dc2: at("10.2"),
                    name,
                }
            })
            .collect();
        Self {
            plans,
            sync_every,
            dc1_power: None,
        }
    }
}

/// The name of plan `i` of [`Scenario::scaled`]: `p00000`, `p00001`, ...
pub fn scaled_plan_name(i: usize) -> String {
    format!("p{i:05}")
}

fn bmc_state(host: &str, uuid: &str, power: PowerState) -> BmcState {
    let mut system = System::new(host, uuid);
    system.power = power;
    BmcState::new(
        vec![system],
        vec![Account::new("qfence", BMC_PASSWORD, Role::Operator)],
    )
}

/// How [`Sims::config_text_with`] shapes examples/lab.yaml.
#[derive(Debug, Clone, Copy)]
pub struct LabConfig<'a> {
    /// Cluster addresses of orchestrators, by name (the others keep examples/lab.yaml's).
    pub orchestrators: &'a [(&'a str, SocketAddr)],
    /// The plan's timing lines, in place of `interval_seconds: 10` (indented four spaces).
    pub timings: &'a str,
    /// One orchestrator (at dc1) runs everything: pve-dc2 is reachable from dc1 too
    /// (otherwise only an orchestrator at dc2 may call it, as in examples/lab.yaml).
    pub one_orchestrator: bool,
}

impl Default for LabConfig<'_> {
    fn default() -> Self {
        Self {
            orchestrators: &[],
            timings: TIMINGS,
            one_orchestrator: false,
        }
    }
}

impl Sims {
    /// The demo's scenario ([`Scenario::lab`]): see [`Sims::start_with`].
    pub async fn start() -> Result<Self, LabError> {
        Self::start_with(&Scenario::lab()).await
    }

    /// dc1 runs every plan's VM on a powered host whose power line drives pve-dc1's node (BMC
    /// off → node offline → VMs stopped, API dark). dc2 is the fenced standby: its host is off
    /// at the BMC and its replicas stopped; pve-dc2's API stays up (the lab's dc2 API is served
    /// by the cluster, not by the fenced host), so dc2's readiness can be read. Every plan's
    /// VIP points at dc1.
    pub async fn start_with(scenario: &Scenario) -> Result<Self, LabError> {
        let Scenario {
            plans,
            sync_every,
            dc1_power,
        } = scenario;
        let sync_every = *sync_every;
        let vms: Vec<PveVm<'_>> = plans
            .iter()
            .map(|p| PveVm {
                id: p.vm,
                name: &p.name,
            })
            .collect();
        let bmc1 = redfish::start(
            loopback(),
            TlsIdentity::loopback()?,
            bmc_state(
                "pve-dc1-01",
                "5b7e4f10-0001-4c2a-9d5e-000000000001",
                PowerState::On,
            ),
        )
        .await?;
        let bmc2 = redfish::start(
            loopback(),
            TlsIdentity::loopback()?,
            bmc_state(
                "pve-dc2-01",
                "5b7e4f10-0002-4c2a-9d5e-000000000002",
                PowerState::Off,
            ),
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
                sync_every,
            ),
        )
        .await?;
        let line = match dc1_power {
            Some(line) => line.clone(),
            None => bmc1
                .power_line("pve-dc1-01")
                .ok_or_else(|| LabError::InvalidState("bmc-dc1 has no system pve-dc1-01".into()))?,
        };
        pve1.attach_power("pve-dc1-01", line);
        let pve2 = proxmox::start(
            loopback(),
            TlsIdentity::loopback()?,
            pve_state(
                "pve-dc2",
                "pve-dc2-01",
                &vms,
                VmStatus::Stopped,
                "pve-dc1-01",
                sync_every,
            ),
        )
        .await?;
        let mut forti = FortiState::example();
        let root = forti
            .vdoms
            .get_mut("root")
            .ok_or_else(|| LabError::InvalidState("the FortiGate has no VDOM root".into()))?;
        for p in plans {
            root.vips.insert(
                p.vip.clone(),
                Vip {
                    extip: p.extip.clone(),
                    mappedip: vec![p.dc1.clone()],
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

    /// Where the VIP points now.
    pub fn vip(&self) -> Vec<String> {
        self.fgt
            .state()
            .vdoms
            .get("root")
            .and_then(|v| v.vips.get(VIP))
            .map(|v| v.mappedip.clone())
            .unwrap_or_default()
    }

    /// examples/lab.yaml pointed at these simulators (pinned certificates), with the given
    /// orchestrator cluster addresses and the lab's [`TIMINGS`].
    pub fn config_text(&self, orchestrators: &[(&str, SocketAddr)]) -> String {
        self.config_text_with(&LabConfig {
            orchestrators,
            ..LabConfig::default()
        })
    }

    /// examples/lab.yaml pointed at these simulators (pinned certificates, 2 s timeouts),
    /// shaped by `c`.
    pub fn config_text_with(&self, c: &LabConfig<'_>) -> String {
        let mut text = include_str!("../../../../examples/lab.yaml").to_owned();
        for (port, url, pin) in self.targets() {
            let old = format!("endpoint: https://127.0.0.1:{port}");
            let Some(at) = text.find(&old) else { continue };
            if let Some(rel) = text[at..].find("tls: {insecure: true}") {
                let tls_at = at + rel;
                text.replace_range(
                    tls_at..tls_at + "tls: {insecure: true}".len(),
                    &format!("timeout_seconds: 2\n    tls: {{pin: \"sha256:{pin}\"}}"),
                );
            }
            text = text.replacen(&old, &format!("endpoint: {url}"), 1);
        }
        for (name, addr) in c.orchestrators {
            let Some(at) = text.find(&format!("  {name}: {{site:")) else {
                continue;
            };
            let Some(q) = text[at..].find("address: \"") else {
                continue;
            };
            let start = at + q + "address: \"".len();
            let Some(end) = text[start..].find('"') else {
                continue;
            };
            text.replace_range(start..start + end, &addr.to_string());
        }
        if c.one_orchestrator {
            text = text.replacen(
                "    site: dc2\n    secret: lab-proxmox",
                "    site: dc2\n    reach: [dc1]\n    secret: lab-proxmox",
                1,
            );
        }
        text.replacen("    interval_seconds: 10\n", c.timings, 1)
    }

    /// Each simulator's port in examples/lab.yaml, its URL and its certificate's pin.
    fn targets(&self) -> [(&'static str, String, &str); 5] {
        [
            ("8443", self.bmc1.base_url(), self.bmc1.fingerprint()),
            ("8444", self.bmc2.base_url(), self.bmc2.fingerprint()),
            ("8006", self.pve1.base_url(), self.pve1.fingerprint()),
            ("8007", self.pve2.base_url(), self.pve2.fingerprint()),
            ("8445", self.fgt.url(), self.fgt_pin.as_str()),
        ]
    }

    /// A configuration for a [`Scenario::scaled`]'s plans over these simulators: the lab's
    /// sites, orchestrators and controllers (each reachable from the other site too, so one
    /// orchestrator anywhere runs everything), and per plan the lab's bindings (BMC and VM
    /// fences, replication readiness, VM health and start, the VIP) with `plan_lines` (the
    /// timings, indented four spaces, one per line) as its settings.
    pub fn scaled_config(&self, plans: &[ScenarioPlan], plan_lines: &str) -> String {
        let mut t = String::with_capacity(1200 * plans.len() + 4096);
        t.push_str(
            "cluster:\n  name: scale\nsites:\n  dc1: {}\n  dc2: {}\n  witness: {witness: true}\n\
             orchestrators:\n  dc1-a: {site: dc1, address: \"127.0.0.1:7401\"}\n  \
             dc2-a: {site: dc2, address: \"127.0.0.1:7402\"}\n  \
             witness-a: {site: witness, address: \"127.0.0.1:7403\"}\ncontrollers:\n",
        );
        let redfish = "    secret: lab-redfish\n    username: qfence\n";
        let pve = "    secret: lab-proxmox\n    token_id: qfence@pve!fence\n";
        let fgt = "    secret: lab-fortigate\n    vdom: root\n";
        let [bmc1, bmc2, pve1, pve2, edge] = self.targets();
        for ((_, url, pin), name, kind, at, extra) in [
            (bmc1, "bmc-dc1", "redfish", "dc1", redfish),
            (bmc2, "bmc-dc2", "redfish", "dc2", redfish),
            (pve1, "pve-dc1", "proxmox", "dc1", pve),
            (pve2, "pve-dc2", "proxmox", "dc2", pve),
            (edge, "fgt-edge", "fortigate", "dc1", fgt),
        ] {
            let other = if at == "dc1" { "dc2" } else { "dc1" };
            let _ = write!(
                t,
                "  {name}:\n    type: {kind}\n    endpoint: {url}\n    site: {at}\n    \
                 reach: [{other}]\n{extra}    timeout_seconds: 2\n    tls: {{pin: \"sha256:{pin}\"}}\n",
            );
        }
        t.push_str("plans:\n");
        for p in plans {
            let id = p.vm;
            let _ = write!(
                t,
                "  {}:\n    owner: dc1\n{plan_lines}    instances:\n",
                p.name
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
                "    service:\n      - {{controller: fgt-edge, capability: vip.own, resource: {vip}, \
                 role: service, params: {{dc1: {a}, dc2: {b}}}}}\n",
                vip = p.vip,
                a = p.dc1,
                b = p.dc2,
            );
        }
        t
    }

    /// Stops every simulator.
    pub async fn stop(mut self) {
        self.fgt.shutdown().await;
        self.pve1.shutdown().await;
        self.pve2.shutdown().await;
        self.bmc1.shutdown().await;
        self.bmc2.shutdown().await;
    }
}

/// Lower-case hex SHA-256.
pub fn hex_sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
