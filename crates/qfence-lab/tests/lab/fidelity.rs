//! Fidelity: the simulators against independent implementations, call by call.
//!
//! For the calls qfence's drivers make, the simulator must answer with the same status code
//! and carry every field the emulator carries at the JSON pointers the drivers read. Other
//! differences (extra fields, richer models) are printed as a report, not failed on.
//!
//! Part of the suite: each test starts what it compares with through the project's emulator
//! scripts (`tools/emulators`, the controller tests' [`Starter`]): sushy-tools for Redfish,
//! fakepve for Proxmox VE; Debian's fence-agents drive both simulators; and the FortiOS
//! simulator, which has no independent emulator, is driven by fortiosapi (Fortinet's Python
//! client, written against real FortiGates) making the calls qfence's driver makes.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use qfence_lab::TlsIdentity;
use qfence_lab::fortios::{self, FortiState};
use qfence_lab::proxmox::{self, ApiToken, HaService, Node, PveState, Vm, VmStatus};
use qfence_lab::redfish::{self, Account, BmcState, Role, System};
use reqwest::{Client, RequestBuilder};
use serde_json::{Value, json};

use crate::common::{Reply, call, init, loopback, phase};
use crate::emulators::{Starter, have_program, missing, tools_dir, venv_dir};

fn lenient() -> Client {
    init();
    Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// Collects what differs; `critical` differences fail the test.
#[derive(Default)]
struct Comparison {
    critical: Vec<String>,
    notes: Vec<String>,
}

impl Comparison {
    /// Same status; every pointer present in the emulator's answer is present in ours.
    fn compare(&mut self, call: &str, emulator: &Reply, sim: &Reply, pointers: &[&str]) {
        if emulator.status != sim.status {
            self.critical.push(format!(
                "{call}: status {} (emulator) vs {} (simulator)",
                emulator.status, sim.status
            ));
        }
        for pointer in pointers {
            let theirs = emulator.body.pointer(pointer);
            let ours = sim.body.pointer(pointer);
            match (theirs, ours) {
                (Some(_), None) => self
                    .critical
                    .push(format!("{call}: simulator lacks {pointer}")),
                (None, Some(_)) => self
                    .notes
                    .push(format!("{call}: only the simulator has {pointer}")),
                (Some(a), Some(b)) if json_kind(a) != json_kind(b) => self.critical.push(format!(
                    "{call}: {pointer} is {} (emulator) vs {} (simulator)",
                    json_kind(a),
                    json_kind(b)
                )),
                _ => {}
            }
        }
        self.note_keys(call, &emulator.body, &sim.body);
    }

    /// A difference we know and accept, recorded for the report.
    fn accept(&mut self, call: &str, emulator: &Reply, sim: &Reply, why: &str) {
        self.notes.push(format!(
            "{call}: emulator {} vs simulator {} ({why})",
            emulator.status, sim.status
        ));
    }

    fn note_keys(&mut self, call: &str, emulator: &Value, sim: &Value) {
        let first = |v: &Value| -> Value {
            match v.get("data").unwrap_or(v) {
                Value::Array(a) => a.first().cloned().unwrap_or(Value::Null),
                other => other.clone(),
            }
        };
        let keys = |v: &Value| -> BTreeSet<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        let (theirs, ours) = (keys(&first(emulator)), keys(&first(sim)));
        let missing: Vec<_> = theirs.difference(&ours).cloned().collect();
        let extra: Vec<_> = ours.difference(&theirs).cloned().collect();
        if !missing.is_empty() {
            self.notes.push(format!(
                "{call}: fields only the emulator sends: {missing:?}"
            ));
        }
        if !extra.is_empty() {
            self.notes.push(format!(
                "{call}: fields only the simulator sends: {extra:?}"
            ));
        }
    }

    fn finish(self, name: &str) -> Result<()> {
        eprintln!("== {name} fidelity report");
        for note in &self.notes {
            eprintln!("   note: {note}");
        }
        for critical in &self.critical {
            eprintln!("   DIFF: {critical}");
        }
        ensure!(
            self.critical.is_empty(),
            "{} critical differences",
            self.critical.len()
        );
        Ok(())
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

async fn both(emulator: RequestBuilder, sim: RequestBuilder) -> Result<(Reply, Reply)> {
    Ok((call(emulator).await?, call(sim).await?))
}

#[tokio::test]
async fn fidelity_redfish_against_sushy_tools() -> Result<()> {
    let Some(emu) = Starter::new("start-redfish-sushy.sh")
        .prefix("qlab-sushy-")
        .venv("sushy")
        .tcp_port("REDFISH_PORT")
        .env("REDFISH_POWER_DELAY", "0")
        .start()
    else {
        return Ok(());
    };
    let sushy = format!("https://127.0.0.1:{}", emu.port("REDFISH_PORT"));
    let c = lenient();
    let (user, pw) = ("admin", "password");

    phase("discover sushy's first system, and mirror its ids in the simulator");
    let systems = call(
        c.get(format!("{sushy}/redfish/v1/Systems"))
            .basic_auth(user, Some(pw)),
    )
    .await?;
    let their_path = systems.body["Members"][0]["@odata.id"]
        .as_str()
        .expect("a system")
        .to_owned();
    let their_id = their_path.rsplit('/').next().unwrap().to_owned();
    let state = BmcState::new(
        vec![System::new(&their_id, &their_id)],
        vec![Account::new(user, pw, Role::Administrator)],
    );
    let h = redfish::start(loopback(), TlsIdentity::loopback()?, state).await?;
    let ours = h.base_url();
    let get = |base: &str, path: &str| c.get(format!("{base}{path}")).basic_auth(user, Some(pw));
    let mut cmp = Comparison::default();

    let (a, b) = both(
        c.get(format!("{sushy}/redfish/v1/")),
        c.get(format!("{ours}/redfish/v1/")),
    )
    .await?;
    cmp.compare(
        "GET /redfish/v1 (no auth)",
        &a,
        &b,
        &[
            "/UUID",
            "/Systems/@odata.id",
            "/Managers/@odata.id",
            "/RedfishVersion",
        ],
    );

    let (a, b) = both(
        c.get(format!("{sushy}/redfish/v1/Systems")),
        c.get(format!("{ours}/redfish/v1/Systems")),
    )
    .await?;
    cmp.compare(
        "GET Systems (no auth)",
        &a,
        &b,
        &[
            "/error/code",
            "/error/message",
            "/error/@Message.ExtendedInfo/0/MessageId",
        ],
    );
    if a.header("WWW-Authenticate").is_some() != b.header("WWW-Authenticate").is_some() {
        cmp.critical
            .push("401 WWW-Authenticate header differs".into());
    }

    let (a, b) = both(
        get(&sushy, "/redfish/v1/Systems"),
        get(&ours, "/redfish/v1/Systems"),
    )
    .await?;
    cmp.compare(
        "GET Systems",
        &a,
        &b,
        &["/Members", "/Members@odata.count", "/Members/0/@odata.id"],
    );

    let system = format!("/redfish/v1/Systems/{their_id}");
    let (a, b) = both(get(&sushy, &system), get(&ours, &system)).await?;
    let reset = "/Actions/#ComputerSystem.Reset";
    cmp.compare(
        "GET Systems/{id}",
        &a,
        &b,
        &[
            "/Id",
            "/UUID",
            "/Name",
            "/PowerState",
            &format!("{reset}/target"),
            &format!("{reset}/ResetType@Redfish.AllowableValues"),
            "/Status/State",
        ],
    );
    for value in ["On", "ForceOff"] {
        let allows = |r: &Reply| {
            r.body
                .pointer(&format!("{reset}/ResetType@Redfish.AllowableValues"))
                .and_then(Value::as_array)
                .is_some_and(|v| v.contains(&json!(value)))
        };
        if allows(&a) != allows(&b) {
            cmp.critical
                .push(format!("AllowableValues disagree on {value}"));
        }
    }
    let target_a = a
        .body
        .pointer(&format!("{reset}/target"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let target_b = b
        .body
        .pointer(&format!("{reset}/target"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();

    let post = |base: &str, target: &str, body: Value| {
        c.post(format!("{base}{target}"))
            .basic_auth(user, Some(pw))
            .json(&body)
    };
    let (a, b) = both(
        post(&sushy, &target_a, json!({"ResetType": "Nmi-Bogus"})),
        post(&ours, &target_b, json!({"ResetType": "Nmi-Bogus"})),
    )
    .await?;
    cmp.accept(
        "POST Reset {ResetType: unknown}",
        &a,
        &b,
        "sushy answers 501; real BMCs and the spec use 400",
    );
    cmp.note_keys(
        "POST Reset unknown (error body)",
        &a.body["error"],
        &b.body["error"],
    );

    let was_on = get(&sushy, &system).send().await?.json::<Value>().await?["PowerState"] == "On";
    let (first, restore) = if was_on {
        ("ForceOff", "On")
    } else {
        ("On", "ForceOff")
    };
    let (a, b) = both(
        post(&sushy, &target_a, json!({"ResetType": first})),
        post(&ours, &target_b, json!({"ResetType": first})),
    )
    .await?;
    cmp.compare(&format!("POST Reset {first}"), &a, &b, &[]);
    let (a, b) = both(
        post(&sushy, &target_a, json!({"ResetType": restore})),
        post(&ours, &target_b, json!({"ResetType": restore})),
    )
    .await?;
    cmp.compare(&format!("POST Reset {restore}"), &a, &b, &[]);

    let (a, b) = both(
        get(&sushy, "/redfish/v1/Systems/no-such-system"),
        get(&ours, "/redfish/v1/Systems/no-such-system"),
    )
    .await?;
    cmp.compare(
        "GET Systems/{unknown}",
        &a,
        &b,
        &["/error/code", "/error/message"],
    );

    let (a, b) = both(
        get(&sushy, "/redfish/v1/Managers"),
        get(&ours, "/redfish/v1/Managers"),
    )
    .await?;
    cmp.compare("GET Managers", &a, &b, &["/Members/0/@odata.id"]);
    let (ma, mb) = (
        a.body["Members"][0]["@odata.id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        b.body["Members"][0]["@odata.id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    );
    let (a, b) = both(get(&sushy, &ma), get(&ours, &mb)).await?;
    cmp.compare(
        "GET Managers/{id}",
        &a,
        &b,
        &[
            "/ManagerType",
            "/Links/ManagerForServers/0/@odata.id",
            "/UUID",
        ],
    );

    for path in ["/redfish/v1/SessionService", "/redfish/v1/AccountService"] {
        let (a, b) = both(get(&sushy, path), get(&ours, path)).await?;
        if a.status != b.status {
            cmp.accept(
                &format!("GET {path}"),
                &a,
                &b,
                "sushy does not implement it; the simulator follows the spec",
            );
        }
    }
    h.shutdown().await;
    cmp.finish("Redfish (sushy-tools)")
}

/// A simulator laid out like fakepve's default scenario.
fn fakepve_like() -> PveState {
    let mut s = PveState::single_node("qfence", "pve1", "secret");
    s.nodes.push(Node::new("pve2", 2, "192.0.2.12"));
    s.nodes.push(Node::new("pve3", 3, "192.0.2.13"));
    s.vms.push(Vm::new(100, "db1", "pve1", VmStatus::Running));
    s.vms.push(Vm::new(101, "db2", "pve2", VmStatus::Running));
    let mut app = Vm::new(102, "app1", "pve2", VmStatus::Running);
    app.ha = Some(HaService::started());
    s.vms.push(app);
    s.vms.push(Vm::new(103, "spare", "pve3", VmStatus::Stopped));
    s.ha_delay = Duration::from_secs(1);
    s.tokens.push(ApiToken {
        userid: "root@pam".into(),
        name: "qfence".into(),
        secret: "11111111-2222-3333-4444-555555555555".into(),
        privsep: false,
        acl: vec![],
    });
    s.task_duration = Duration::ZERO;
    s
}

#[tokio::test]
async fn fidelity_proxmox_against_fakepve() -> Result<()> {
    let Some(emu) = Starter::new("start-pve-fakepve.sh")
        .prefix("qlab-pve-")
        .venv("fakepve")
        .tcp_port("PVE_PORT")
        .tcp_port("PVE_CTL_PORT")
        .start()
    else {
        return Ok(());
    };
    let fake = format!("https://127.0.0.1:{}/api2/json", emu.port("PVE_PORT"));
    let control = format!("http://127.0.0.1:{}", emu.port("PVE_CTL_PORT"));
    let token = "PVEAPIToken=root@pam!qfence=11111111-2222-3333-4444-555555555555";
    let c = lenient();
    let h = proxmox::start(loopback(), TlsIdentity::loopback()?, fakepve_like()).await?;
    let ours = format!("{}/api2/json", h.base_url());
    let get = |base: &str, path: &str| {
        c.get(format!("{base}{path}"))
            .header("Authorization", token)
    };
    let post = |base: &str, path: &str| {
        c.post(format!("{base}{path}"))
            .header("Authorization", token)
    };
    let mut cmp = Comparison::default();

    let (a, b) = both(
        c.get(format!("{fake}/version")),
        c.get(format!("{ours}/version")),
    )
    .await?;
    cmp.compare("GET /version (no auth)", &a, &b, &["/data", "/message"]);
    let bad = "PVEAPIToken=root@pam!qfence=wrong";
    let (a, b) = both(
        c.get(format!("{fake}/version"))
            .header("Authorization", bad),
        c.get(format!("{ours}/version"))
            .header("Authorization", bad),
    )
    .await?;
    cmp.compare("GET /version (bad secret)", &a, &b, &["/data", "/message"]);

    let (a, b) = both(get(&fake, "/version"), get(&ours, "/version")).await?;
    cmp.compare(
        "GET /version",
        &a,
        &b,
        &["/data/version", "/data/release", "/data/repoid"],
    );

    let (a, b) = both(get(&fake, "/cluster/status"), get(&ours, "/cluster/status")).await?;
    cmp.compare(
        "GET /cluster/status",
        &a,
        &b,
        &[
            "/data/0/type",
            "/data/0/name",
            "/data/0/quorate",
            "/data/0/nodes",
            "/data/1/name",
            "/data/1/online",
            "/data/1/local",
            "/data/1/nodeid",
            "/data/1/ip",
        ],
    );

    let (a, b) = both(get(&fake, "/nodes"), get(&ours, "/nodes")).await?;
    cmp.compare(
        "GET /nodes",
        &a,
        &b,
        &[
            "/data/0/node",
            "/data/0/status",
            "/data/0/id",
            "/data/0/type",
        ],
    );

    let (a, b) = both(
        get(&fake, "/cluster/resources?type=vm"),
        get(&ours, "/cluster/resources?type=vm"),
    )
    .await?;
    cmp.compare(
        "GET /cluster/resources?type=vm",
        &a,
        &b,
        &[
            "/data/0/id",
            "/data/0/vmid",
            "/data/0/node",
            "/data/0/type",
            "/data/0/status",
            "/data/0/name",
            "/data/0/template",
        ],
    );

    let (a, b) = both(
        get(&fake, "/nodes/pve1/qemu/100/status/current"),
        get(&ours, "/nodes/pve1/qemu/100/status/current"),
    )
    .await?;
    cmp.compare(
        "GET status/current",
        &a,
        &b,
        &[
            "/data/status",
            "/data/qmpstatus",
            "/data/vmid",
            "/data/name",
            "/data/pid",
            "/data/uptime",
            "/data/ha/managed",
        ],
    );

    let (a, b) = both(
        get(&fake, "/nodes/pve1/qemu/999/status/current"),
        get(&ours, "/nodes/pve1/qemu/999/status/current"),
    )
    .await?;
    cmp.compare(
        "GET status/current (no such VM)",
        &a,
        &b,
        &["/data", "/message"],
    );
    if a.body["message"] != b.body["message"] {
        cmp.critical.push(format!(
            "no-such-VM message: {} vs {}",
            a.body["message"], b.body["message"]
        ));
    }

    let (a, b) = both(
        get(&fake, "/nodes/pve1/qemu/100/config"),
        get(&ours, "/nodes/pve1/qemu/100/config"),
    )
    .await?;
    cmp.compare(
        "GET qemu/{id}/config",
        &a,
        &b,
        &["/data/name", "/data/memory", "/data/digest", "/data/cores"],
    );

    phase("stop a stopped VM on both: a UPID, then the task's status");
    let (a, b) = both(
        post(&fake, "/nodes/pve3/qemu/103/status/stop"),
        post(&ours, "/nodes/pve3/qemu/103/status/stop"),
    )
    .await?;
    cmp.compare("POST status/stop", &a, &b, &["/data"]);
    let shape = |r: &Reply| -> Vec<String> {
        let upid = r.body["data"].as_str().unwrap_or_default();
        let parts: Vec<&str> = upid.split(':').collect();
        vec![
            parts.len().to_string(),
            parts.get(1).unwrap_or(&"").to_string(),
            parts[5..parts.len().min(8)].join(":"),
            parts.get(2).map_or(0, |p| p.len()).to_string(),
        ]
    };
    if shape(&a) != shape(&b) {
        cmp.critical
            .push(format!("UPID shape {:?} vs {:?}", shape(&a), shape(&b)));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ua, ub) = (
        a.body["data"].as_str().unwrap_or_default().to_owned(),
        b.body["data"].as_str().unwrap_or_default().to_owned(),
    );
    let (a, b) = both(
        get(&fake, &format!("/nodes/pve3/tasks/{ua}/status")),
        get(&ours, &format!("/nodes/pve3/tasks/{ub}/status")),
    )
    .await?;
    cmp.compare(
        "GET tasks/{upid}/status",
        &a,
        &b,
        &[
            "/data/status",
            "/data/exitstatus",
            "/data/type",
            "/data/id",
            "/data/user",
            "/data/upid",
            "/data/node",
            "/data/pid",
            "/data/pstart",
            "/data/starttime",
            "/data/tokenid",
        ],
    );

    let (a, b) = both(
        post(&fake, "/nodes/pve3/qemu/103/status/shutdown"),
        post(&ours, "/nodes/pve3/qemu/103/status/shutdown"),
    )
    .await?;
    cmp.compare(
        "POST status/shutdown (stopped VM)",
        &a,
        &b,
        &["/data", "/message"],
    );

    let form = "username=root%40pam&password=secret";
    let login = |base: &str| {
        c.post(format!("{base}/access/ticket"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form)
    };
    let (a, b) = both(login(&fake), login(&ours)).await?;
    cmp.compare(
        "POST /access/ticket",
        &a,
        &b,
        &[
            "/data/ticket",
            "/data/CSRFPreventionToken",
            "/data/username",
        ],
    );
    let (ta, tb) = (a.body["data"].clone(), b.body["data"].clone());
    let cookie_post = |base: &str, t: &Value, csrf: bool| {
        let r = c
            .post(format!("{base}/nodes/pve3/qemu/103/status/stop"))
            .header(
                "Cookie",
                format!("PVEAuthCookie={}", t["ticket"].as_str().unwrap_or_default()),
            );
        if csrf {
            r.header(
                "CSRFPreventionToken",
                t["CSRFPreventionToken"].as_str().unwrap_or_default(),
            )
        } else {
            r
        }
    };
    let (a, b) = both(
        cookie_post(&fake, &ta, false),
        cookie_post(&ours, &tb, false),
    )
    .await?;
    cmp.compare("POST with ticket, no CSRF", &a, &b, &["/data"]);
    let (a, b) = both(cookie_post(&fake, &ta, true), cookie_post(&ours, &tb, true)).await?;
    cmp.compare("POST with ticket and CSRF", &a, &b, &["/data"]);

    let (a, b) = both(
        get(&fake, "/access/permissions?path=/vms/100"),
        get(&ours, "/access/permissions?path=/vms/100"),
    )
    .await?;
    let has = |r: &Reply, path: &str| {
        r.body["data"]
            .get(path)
            .and_then(|p| p.get("VM.PowerMgmt"))
            .is_some()
    };
    cmp.notes.push(format!(
        "GET /access/permissions?path=/vms/100: emulator keys {:?}, simulator keys {:?} (real PVE answers with the asked path)",
        a.body["data"].as_object().map(|o| o.keys().collect::<Vec<_>>()),
        b.body["data"].as_object().map(|o| o.keys().collect::<Vec<_>>()),
    ));
    if !(has(&a, "/") || has(&a, "/vms/100")) || !has(&b, "/vms/100") {
        cmp.critical
            .push("permissions do not show VM.PowerMgmt for root".into());
    }

    phase("an HA-managed VM: hastop, OK at once, stopped about a second later on both");
    let (a, b) = both(
        get(&fake, "/nodes/pve2/qemu/102/status/current"),
        get(&ours, "/nodes/pve2/qemu/102/status/current"),
    )
    .await?;
    cmp.compare(
        "GET status/current (HA)",
        &a,
        &b,
        &["/data/ha/managed", "/data/ha/state"],
    );
    let (a, b) = both(
        post(&fake, "/nodes/pve2/qemu/102/status/stop"),
        post(&ours, "/nodes/pve2/qemu/102/status/stop"),
    )
    .await?;
    let kind = |r: &Reply| {
        r.body["data"]
            .as_str()
            .unwrap_or_default()
            .split(':')
            .nth(5)
            .unwrap_or_default()
            .to_owned()
    };
    if kind(&a) != kind(&b) {
        cmp.critical
            .push(format!("HA stop task type: {} vs {}", kind(&a), kind(&b)));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (a, b) = both(
        get(&fake, "/nodes/pve2/qemu/102/status/current"),
        get(&ours, "/nodes/pve2/qemu/102/status/current"),
    )
    .await?;
    if a.body["data"]["status"] != b.body["data"]["status"] {
        cmp.critical.push(format!(
            "HA VM after stop: {} vs {}",
            a.body["data"]["status"], b.body["data"]["status"]
        ));
    }
    cmp.notes.push(format!(
        "HA VM after stop: ha {} (emulator) vs {} (simulator)",
        a.body["data"]["ha"], b.body["data"]["ha"]
    ));
    both(
        post(&fake, "/nodes/pve2/qemu/102/status/start"),
        post(&ours, "/nodes/pve2/qemu/102/status/start"),
    )
    .await?;

    let (a, b) = both(
        get(&fake, "/nodes/pve1/replication"),
        get(&ours, "/nodes/pve1/replication"),
    )
    .await?;
    cmp.accept(
        "GET /nodes/{n}/replication",
        &a,
        &b,
        "fakepve's replication is static; the simulator models real jobs",
    );

    phase("pve2 offline on both");
    c.post(format!("{control}/node/pve2/offline"))
        .send()
        .await?;
    h.update(|s| s.nodes[1].reachable = false);
    let (a, b) = both(
        get(&fake, "/nodes/pve2/qemu/101/status/current"),
        get(&ours, "/nodes/pve2/qemu/101/status/current"),
    )
    .await?;
    cmp.compare(
        "GET status/current (offline node)",
        &a,
        &b,
        &["/data", "/message"],
    );
    if a.body["message"] != b.body["message"] {
        cmp.critical.push(format!(
            "595 message: {} vs {}",
            a.body["message"], b.body["message"]
        ));
    }
    let (a, b) = both(
        get(&fake, "/cluster/resources?type=vm"),
        get(&ours, "/cluster/resources?type=vm"),
    )
    .await?;
    let status_101 = |r: &Reply| {
        r.body["data"]
            .as_array()
            .and_then(|v| v.iter().find(|e| e["vmid"] == 101))
            .map(|e| e["status"].clone())
    };
    if status_101(&a) != status_101(&b) {
        cmp.critical.push(format!(
            "VM on offline node: {:?} vs {:?}",
            status_101(&a),
            status_101(&b)
        ));
    }
    c.post(format!("{control}/node/pve2/online")).send().await?;

    let (a, b) = both(
        get(&fake, "/nodes/nosuch/qemu"),
        get(&ours, "/nodes/nosuch/qemu"),
    )
    .await?;
    cmp.accept(
        "GET /nodes/{unknown}/qemu",
        &a,
        &b,
        "fakepve lists nothing; real PVE fails the hostname lookup with 500",
    );
    let (a, b) = both(
        get(&fake, "/nodes/pve1/frobnicate"),
        get(&ours, "/nodes/pve1/frobnicate"),
    )
    .await?;
    cmp.accept(
        "GET unknown path",
        &a,
        &b,
        "real PVE answers 501 'Method ... not implemented'",
    );
    h.shutdown().await;
    cmp.finish("Proxmox VE (fakepve)")
}

/// Runs a fence agent and returns its exit code and output.
async fn agent(program: &str, args: &[String]) -> Result<(i32, String)> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.code().unwrap_or(-1), text))
}

/// Debian's fence-agents (independent clients of both protocols) drive the simulators:
/// status, off (they poll until off), status again, on.
#[tokio::test]
async fn fidelity_fence_agents_drive_the_simulators() -> Result<()> {
    for agent in ["fence_redfish", "fence_pve"] {
        if !have_program(agent) {
            missing(&format!("{agent} (Debian's fence-agents)"));
            return Ok(());
        }
    }
    phase("fence_redfish against the BMC simulator");
    let state = BmcState::new(
        vec![System::new(
            "pve-dc1-01",
            "5b7e4f10-0001-4c2a-9d5e-000000000001",
        )],
        vec![Account::new("admin", "password", Role::Administrator)],
    );
    let bmc = redfish::start(loopback(), TlsIdentity::loopback()?, state).await?;
    let base = vec![
        "--ip=127.0.0.1".to_owned(),
        format!("--ipport={}", bmc.addr().port()),
        "--username=admin".to_owned(),
        "--password=password".to_owned(),
        "--ssl-insecure".to_owned(),
        "--systems-uri=/redfish/v1/Systems/pve-dc1-01".to_owned(),
    ];
    let with = |action: &str| {
        let mut a = base.clone();
        a.push(format!("--action={action}"));
        a
    };
    for (action, code, says) in [
        ("status", 0, "Status: ON"),
        ("off", 0, "Success: Powered OFF"),
        ("status", 2, "Status: OFF"),
        ("on", 0, "Success: Powered ON"),
    ] {
        let (rc, out) = agent("fence_redfish", &with(action)).await?;
        eprintln!("   fence_redfish {action}: rc={rc} {}", out.trim());
        ensure!(
            rc == code && out.contains(says),
            "fence_redfish {action}: rc {rc}: {out}"
        );
    }
    bmc.shutdown().await;

    phase("fence_pve (ticket login) against the Proxmox simulator");
    let mut s = PveState::single_node("pve-dc1", "pve-dc1-01", "secret");
    s.vms
        .push(Vm::new(101, "erp-db", "pve-dc1-01", VmStatus::Running));
    let pve = proxmox::start(loopback(), TlsIdentity::loopback()?, s).await?;
    let base = vec![
        "--ip=127.0.0.1".to_owned(),
        format!("--ipport={}", pve.addr().port()),
        "--username=root@pam".to_owned(),
        "--password=secret".to_owned(),
        "--ssl-insecure".to_owned(),
        "--plug=101".to_owned(),
        "--pve-node=pve-dc1-01".to_owned(),
    ];
    let with = |action: &str| {
        let mut a = base.clone();
        a.push(format!("--action={action}"));
        a
    };
    for (action, code, says) in [
        ("status", 0, "Status: ON"),
        ("off", 0, "Success: Powered OFF"),
        ("status", 2, "Status: OFF"),
        ("on", 0, "Success: Powered ON"),
    ] {
        let (rc, out) = agent("fence_pve", &with(action)).await?;
        eprintln!("   fence_pve {action}: rc={rc} {}", out.trim());
        ensure!(
            rc == code && out.contains(says),
            "fence_pve {action}: rc {rc}: {out}"
        );
    }
    pve.shutdown().await;
    Ok(())
}

/// The envelope every FortiOS answer carries (Fortinet's REST API reference), as fortiosapi
/// hands it to its callers.
const ENVELOPE: &[&str] = &[
    "http_method",
    "status",
    "http_status",
    "vdom",
    "path",
    "name",
    "serial",
    "version",
    "build",
];

/// fortiosapi, Fortinet's own client, drives the FortiOS simulator through the calls qfence's
/// FortiGate driver makes (status, HA checksums, policies and VIPs read, changed and read back,
/// a refused value, an unknown object and VDOM, a wrong key); each answer must be what that
/// client, written against real FortiGates, expects.
#[tokio::test]
async fn fidelity_fortios_simulator_driven_by_fortiosapi() -> Result<()> {
    let python = venv_dir("fortios").join("bin/python");
    if !venv_dir("fortios").join(".qfence-installed").is_file() {
        missing(&format!(
            "fortiosapi (venv {})",
            venv_dir("fortios").display()
        ));
        return Ok(());
    }
    let tls = qfence_lab::LabTls::self_signed(&["127.0.0.1", "localhost"])?;
    let dir = tempfile::tempdir()?;
    let ca = dir.path().join("fortigate.pem");
    std::fs::write(&ca, &tls.cert_pem)?;
    let mut sim = fortios::start(loopback(), Some(tls), FortiState::example()).await?;
    let host = format!("127.0.0.1:{}", sim.addr().port());
    let ca = ca.to_str().context("UTF-8")?.to_owned();

    phase("fortiosapi makes qfence's calls against the simulator");
    let out = tokio::process::Command::new(&python)
        .arg(tools_dir().join("fortios_client.py"))
        // requests lets these override a session's own `verify` (the simulator's certificate).
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .args([
            host.as_str(),
            ca.as_str(),
            "admin-key",
            "root",
            "1",
            "erp-vip",
            "10.2.1.5",
        ])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "fortios_client.py failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<Value> = serde_json::from_slice(&out.stdout)?;
    let answer = |name: &str| -> Value {
        calls
            .iter()
            .find(|c| c["call"] == name)
            .map(|c| {
                if c.get("answer").is_some() {
                    c["answer"].clone()
                } else {
                    json!({"http_status": c["raw_status"], "raw": c["raw_body"]})
                }
            })
            .unwrap_or(Value::Null)
    };
    let mut problems = Vec::new();
    if answer("tokenlogin")["version"] != "v7.4.5" {
        problems.push(format!("tokenlogin kept version {}", answer("tokenlogin")));
    }
    let mut expect = |name: &str, http: u64, check: &dyn Fn(&Value) -> bool, what: &str| {
        let a = answer(name);
        eprintln!(
            "   {name}: {}",
            a.to_string().chars().take(160).collect::<String>()
        );
        if a["http_status"] != http {
            problems.push(format!(
                "{name}: http_status {} (want {http}): {a}",
                a["http_status"]
            ));
        } else if !check(&a) {
            problems.push(format!("{name}: {what}: {a}"));
        }
        if a.get("raw").is_none() {
            for key in ENVELOPE.iter().filter(|k| a.get(**k).is_none()) {
                problems.push(format!("{name}: the envelope lacks {key}"));
            }
        }
    };
    let first = |a: &Value| a["results"].get(0).cloned().unwrap_or(Value::Null);
    expect(
        "monitor system/status",
        200,
        &|a| a["status"] == "success" && a["results"]["hostname"].is_string(),
        "results.hostname",
    );
    expect(
        "monitor system/ha-checksums",
        200,
        &|a| a["results"].is_array(),
        "results is a list",
    );
    expect(
        "cmdb firewall/policy",
        200,
        &|a| {
            a["results"].as_array().is_some_and(|r| {
                r.len() == 2
                    && r.iter()
                        .all(|p| p["policyid"].is_number() && p["status"].is_string())
            })
        },
        "two policies with policyid and status",
    );
    expect(
        "cmdb firewall/policy/{id}",
        200,
        &|a| first(a)["policyid"] == 1 && first(a)["status"] == "enable",
        "policy 1, enabled",
    );
    expect(
        "put firewall/policy/{id} disable",
        200,
        &|a| a["status"] == "success" && (a["mkey"].is_number() || a["mkey"] == "1"),
        "success with the mkey",
    );
    expect(
        "cmdb firewall/policy/{id} after disable",
        200,
        &|a| first(a)["status"] == "disable",
        "read back disabled",
    );
    expect(
        "put firewall/policy/{id} enable",
        200,
        &|a| a["status"] == "success",
        "success",
    );
    expect(
        "cmdb firewall/vip",
        200,
        &|a| {
            a["results"]
                .as_array()
                .is_some_and(|r| r.iter().any(|v| v["name"] == "erp-vip"))
        },
        "erp-vip listed",
    );
    expect(
        "put firewall/vip/{name} mappedip",
        200,
        &|a| a["status"] == "success" && a["revision_changed"] == true,
        "success, revision changed",
    );
    expect(
        "cmdb firewall/vip/{name} after put",
        200,
        &|a| first(a)["mappedip"][0]["range"] == "10.2.1.5",
        "read back mapped to 10.2.1.5",
    );
    expect(
        "put firewall/vip/{name} bad address",
        424,
        &|a| a["status"] == "error" && a["error"].as_i64().is_some_and(|e| e < 0),
        "an error with a negative code",
    );
    expect(
        "cmdb firewall/policy/{unknown}",
        404,
        &|a| a["status"] == "error",
        "an error",
    );
    expect(
        "cmdb system/settings",
        200,
        &|a| {
            first(a).get("firewall-session-dirty").is_some()
                || a["results"].get("firewall-session-dirty").is_some()
        },
        "firewall-session-dirty",
    );
    expect(
        "cmdb system/api-user",
        200,
        &|a| a["results"].is_array(),
        "results is a list",
    );
    expect(
        "cmdb system/accprofile",
        200,
        &|a| a["results"].is_array(),
        "results is a list",
    );
    expect(
        "cmdb firewall/policy in an unknown vdom",
        404,
        &|a| a["status"] == "error",
        "an error",
    );
    expect("monitor system/status with a wrong key", 401, &|_| true, "");
    // fortiosapi refuses to log in when the device's answer to a wrong key is no envelope.
    if answer("tokenlogin with a wrong key")["logged_in"] != false {
        problems.push(format!(
            "tokenlogin with a wrong key: {}",
            answer("tokenlogin with a wrong key")
        ));
    }
    phase("the simulator's own state agrees with what the client read back");
    let st = sim.state();
    let root = &st.vdoms["root"];
    if !root.policies[&1].enabled {
        problems.push("policy 1 is not enabled again".into());
    }
    if root.vips["erp-vip"].mappedip != ["10.2.1.5"] {
        problems.push(format!(
            "erp-vip maps to {:?}",
            root.vips["erp-vip"].mappedip
        ));
    }
    sim.shutdown().await;
    for p in &problems {
        eprintln!("   DIFF: {p}");
    }
    ensure!(
        problems.is_empty(),
        "{} differences from what fortiosapi expects",
        problems.len()
    );
    Ok(())
}
