//! The lab's five simulators and the configuration that points qfence at them.

use std::net::SocketAddr;
use std::time::Duration;

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

/// The lab's one VM.
const LAB_VMS: &[PveVm<'static>] = &[PveVm {
    id: 101,
    name: "erp-db",
}];
/// One lab "interval" stands for PVE's 15 minutes: a sync every 2 s keeps the lag small.
const LAB_SYNC_EVERY: Duration = Duration::from_secs(2);

fn bmc_state(host: &str, uuid: &str, power: PowerState) -> BmcState {
    let mut system = System::new(host, uuid);
    system.power = power;
    BmcState::new(
        vec![system],
        vec![Account::new("qfence", BMC_PASSWORD, Role::Operator)],
    )
}

impl Sims {
    /// dc1 runs VM 101 on a powered host whose power line drives pve-dc1's node (BMC off →
    /// node offline → VM stopped, API dark). dc2 is the fenced standby: its host is off at
    /// the BMC and its replica of VM 101 stopped; pve-dc2's API stays up (the lab's dc2 API
    /// is served by the cluster, not by the fenced host), so dc2's readiness can be read.
    pub async fn start() -> Result<Self, LabError> {
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
                LAB_VMS,
                VmStatus::Running,
                "pve-dc2-01",
                LAB_SYNC_EVERY,
            ),
        )
        .await?;
        let line = bmc1
            .power_line("pve-dc1-01")
            .ok_or_else(|| LabError::InvalidState("bmc-dc1 has no system pve-dc1-01".into()))?;
        pve1.attach_power("pve-dc1-01", line);
        let pve2 = proxmox::start(
            loopback(),
            TlsIdentity::loopback()?,
            pve_state(
                "pve-dc2",
                "pve-dc2-01",
                LAB_VMS,
                VmStatus::Stopped,
                "pve-dc1-01",
                LAB_SYNC_EVERY,
            ),
        )
        .await?;
        let mut forti = FortiState::example();
        forti
            .vdoms
            .get_mut("root")
            .ok_or_else(|| LabError::InvalidState("the FortiGate has no VDOM root".into()))?
            .vips
            .insert(
                VIP.into(),
                Vip {
                    extip: "192.0.2.20".into(),
                    mappedip: vec![VIP_DC1.into()],
                    extintf: "port1".into(),
                    enabled: true,
                },
            );
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
        let mut text = include_str!("../../../../examples/lab.yaml").to_owned();
        let targets = [
            ("8443", self.bmc1.base_url(), self.bmc1.fingerprint()),
            ("8444", self.bmc2.base_url(), self.bmc2.fingerprint()),
            ("8006", self.pve1.base_url(), self.pve1.fingerprint()),
            ("8007", self.pve2.base_url(), self.pve2.fingerprint()),
            ("8445", self.fgt.url(), self.fgt_pin.as_str()),
        ];
        for (port, url, pin) in targets {
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
        for (name, addr) in orchestrators {
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
        text.replacen("    interval_seconds: 10\n", TIMINGS, 1)
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
