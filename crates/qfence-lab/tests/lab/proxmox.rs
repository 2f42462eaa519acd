//! The Proxmox VE simulator: authentication (token, ticket + CSRF), cluster identity,
//! power actions through UPID tasks, 595 for offline nodes, privileges, and replication.

use std::time::Duration;

use anyhow::Result;
use qfence_lab::TlsIdentity;
use qfence_lab::proxmox::{
    self, Acl, ApiToken, Flapping, HaService, Node, PveHandle, PveState, ReplicationJob, User, Vm,
    VmStatus,
};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Reply, call, client, eventually, loopback, phase, req};

pub const ROOT_TOKEN: &str = "PVEAPIToken=root@pam!qfence=11111111-2222-3333-4444-555555555555";
const AUDIT_TOKEN: &str = "PVEAPIToken=fence@pve!ro=22222222-3333-4444-5555-666666666666";

/// Cluster `pve-dc1`: API node pve-a, VM 101 (running) and 102 on pve-b, a root token and a
/// privilege-separated token of `fence@pve` that may only audit VM 101.
pub fn state() -> PveState {
    let mut s = PveState::single_node("pve-dc1", "pve-a", "secret");
    s.nodes.push(Node::new("pve-b", 2, "10.0.0.2"));
    s.nodes.push(Node::new("pve-c", 3, "10.0.0.3"));
    s.vms
        .push(Vm::new(101, "erp-db", "pve-b", VmStatus::Running));
    s.vms
        .push(Vm::new(102, "erp-app", "pve-b", VmStatus::Stopped));
    s.users.push(User {
        userid: "fence@pve".into(),
        password: Some("fence-pw".into()),
        acl: vec![Acl::new("/vms", &["VM.Audit", "VM.PowerMgmt"], true)],
    });
    s.tokens.push(ApiToken {
        userid: "root@pam".into(),
        name: "qfence".into(),
        secret: "11111111-2222-3333-4444-555555555555".into(),
        privsep: false,
        acl: vec![],
    });
    s.tokens.push(ApiToken {
        userid: "fence@pve".into(),
        name: "ro".into(),
        secret: "22222222-3333-4444-5555-666666666666".into(),
        privsep: true,
        acl: vec![Acl::new("/vms/101", &["VM.Audit"], false)],
    });
    s.task_duration = Duration::from_millis(800);
    s
}

pub async fn pve(state: PveState) -> Result<(PveHandle, Client)> {
    let tls = TlsIdentity::loopback()?;
    let pem = tls.cert_pem().to_owned();
    let handle = proxmox::start(loopback(), tls, state).await?;
    Ok((handle, client(&pem)))
}

pub async fn api(
    c: &Client,
    h: &PveHandle,
    method: Method,
    path: &str,
    token: &str,
) -> Result<Reply> {
    call(req(c, method, &h.base_url(), &format!("/api2/json{path}")).header("Authorization", token))
        .await
}

fn find<'a>(list: &'a Value, key: &str, value: Value) -> &'a Value {
    list.as_array()
        .and_then(|a| a.iter().find(|e| e[key] == value))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn tokens_and_tickets_authenticate_and_csrf_guards_writes() -> Result<()> {
    let (h, c) = pve(state()).await?;
    let base = format!("{}/api2/json", h.base_url());

    phase("no credentials, or a wrong secret: 401 with the PVE error envelope");
    let none = call(c.get(format!("{base}/version"))).await?;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(none.body["data"], Value::Null);
    let bad = api(
        &c,
        &h,
        Method::GET,
        "/version",
        "PVEAPIToken=root@pam!qfence=wrong",
    )
    .await?;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);

    phase("a token reads /version");
    let version = api(&c, &h, Method::GET, "/version", ROOT_TOKEN).await?;
    assert_eq!(version.status, StatusCode::OK);
    assert_eq!(version.body["data"]["version"], "9.0.10");
    assert_eq!(version.body["data"]["release"], "9.0");

    phase("a ticket login (form-encoded), then reads with the cookie");
    let wrong = call(
        c.post(format!("{base}/access/ticket"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("username=root%40pam&password=nope"),
    )
    .await?;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let login = call(
        c.post(format!("{base}/access/ticket"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("username=root%40pam&password=secret"),
    )
    .await?;
    assert_eq!(login.status, StatusCode::OK);
    let ticket = login.body["data"]["ticket"].as_str().unwrap().to_owned();
    let csrf = login.body["data"]["CSRFPreventionToken"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(ticket.starts_with("PVE:root@pam:"));
    assert_eq!(login.body["data"]["username"], "root@pam");
    let cookie = format!("PVEAuthCookie={ticket}");
    let read = call(
        c.get(format!("{base}/cluster/status"))
            .header("Cookie", &cookie),
    )
    .await?;
    assert_eq!(read.status, StatusCode::OK);

    phase("a write with the cookie but without CSRFPreventionToken: 401; with it: a UPID");
    let stop = format!("{base}/nodes/pve-b/qemu/102/status/stop");
    let no_csrf = call(c.post(&stop).header("Cookie", &cookie)).await?;
    assert_eq!(no_csrf.status, StatusCode::UNAUTHORIZED);
    assert!(no_csrf.body["message"].as_str().unwrap().contains("csrf"));
    let with_csrf = call(
        c.post(&stop)
            .header("Cookie", &cookie)
            .header("CSRFPreventionToken", &csrf),
    )
    .await?;
    assert_eq!(with_csrf.status, StatusCode::OK);
    assert!(
        with_csrf.body["data"]
            .as_str()
            .unwrap()
            .contains(":qmstop:102:root@pam:")
    );

    phase("a JSON ticket login works too");
    let json_login = call(
        c.post(format!("{base}/access/ticket"))
            .json(&json!({"username": "fence@pve", "password": "fence-pw"})),
    )
    .await?;
    assert_eq!(json_login.status, StatusCode::OK);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_cluster_nodes_and_guests_are_described_as_pve_does() -> Result<()> {
    let (h, c) = pve(state()).await?;

    let status = api(&c, &h, Method::GET, "/cluster/status", ROOT_TOKEN).await?;
    let cluster = find(&status.body["data"], "type", json!("cluster"));
    assert_eq!(cluster["name"], "pve-dc1");
    assert_eq!(cluster["quorate"], 1);
    assert_eq!(cluster["nodes"], 3);
    let a = find(&status.body["data"], "name", json!("pve-a"));
    assert_eq!(
        (a["type"].clone(), a["online"].clone(), a["local"].clone()),
        (json!("node"), json!(1), json!(1))
    );
    assert_eq!(
        find(&status.body["data"], "name", json!("pve-b"))["local"],
        0
    );

    let nodes = api(&c, &h, Method::GET, "/nodes", ROOT_TOKEN).await?;
    assert_eq!(
        find(&nodes.body["data"], "node", json!("pve-b"))["status"],
        "online"
    );

    let resources = api(
        &c,
        &h,
        Method::GET,
        "/cluster/resources?type=vm",
        ROOT_TOKEN,
    )
    .await?;
    let vm = find(&resources.body["data"], "vmid", json!(101));
    assert_eq!(vm["id"], "qemu/101");
    assert_eq!(vm["node"], "pve-b");
    assert_eq!(vm["type"], "qemu");
    assert_eq!(vm["status"], "running");
    assert!(
        resources.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] == "qemu")
    );

    let listed = api(&c, &h, Method::GET, "/nodes/pve-b/qemu", ROOT_TOKEN).await?;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 2);

    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(current.body["data"]["status"], "running");
    assert_eq!(current.body["data"]["qmpstatus"], "running");
    assert_eq!(current.body["data"]["ha"]["managed"], 0);

    let config = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/config",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(config.body["data"]["name"], "erp-db");
    assert_eq!(config.body["data"]["memory"], "2048");
    assert!(
        config.body["data"]["smbios1"]
            .as_str()
            .unwrap()
            .starts_with("uuid=")
    );
    assert_eq!(config.body["data"]["digest"].as_str().unwrap().len(), 40);

    phase("a VM asked on the wrong node: 500 with PVE's message; an unknown path: 501");
    let wrong_node = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-a/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(wrong_node.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        wrong_node.body["message"]
            .as_str()
            .unwrap()
            .contains("qemu-server/101.conf' does not exist")
    );
    let unknown_node = api(&c, &h, Method::GET, "/nodes/nope/qemu", ROOT_TOKEN).await?;
    assert_eq!(unknown_node.status, StatusCode::INTERNAL_SERVER_ERROR);
    let unknown = api(&c, &h, Method::GET, "/nodes/pve-a/frobnicate", ROOT_TOKEN).await?;
    assert_eq!(unknown.status, StatusCode::NOT_IMPLEMENTED);
    h.shutdown().await;
    Ok(())
}

async fn task_status(c: &Client, h: &PveHandle, upid: &str) -> Result<Value> {
    let node = upid.split(':').nth(1).unwrap();
    let reply = api(
        c,
        h,
        Method::GET,
        &format!("/nodes/{node}/tasks/{upid}/status"),
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    Ok(reply.body["data"].clone())
}

async fn wait_task(c: &Client, h: &PveHandle, upid: &str) -> Result<Value> {
    eventually(Duration::from_secs(10), "task stopped", || async {
        let s = task_status(c, h, upid).await?;
        Ok((s["status"] == "stopped").then_some(s))
    })
    .await
}

#[tokio::test]
async fn power_actions_return_upids_and_take_effect_when_the_task_ends() -> Result<()> {
    let (h, c) = pve(state()).await?;

    phase("stop: a UPID at once; the task runs, then stops with OK; then the VM reads stopped");
    // A long task, so that even a loaded machine reads it while it runs.
    h.update(|s| s.task_duration = Duration::from_secs(3));
    let stop = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    let upid = stop.body["data"].as_str().unwrap().to_owned();
    let parts: Vec<&str> = upid.split(':').collect();
    assert_eq!(parts[0], "UPID");
    assert_eq!(parts[1], "pve-b");
    assert_eq!(&parts[5..8], &["qmstop", "101", "root@pam!qfence"]);
    assert_eq!(parts[2].len(), 8, "pid is 8 hex digits");
    // The VM first, then the task: while the task still runs, the VM must still run.
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    let running = task_status(&c, &h, &upid).await?;
    assert_eq!(running["status"], "running");
    assert!(running.get("exitstatus").is_none());
    assert_eq!(
        current.body["data"]["status"], "running",
        "not before the task ends"
    );
    let done = wait_task(&c, &h, &upid).await?;
    assert_eq!(done["exitstatus"], "OK");
    assert_eq!(done["type"], "qmstop");
    h.update(|s| s.task_duration = Duration::from_millis(800));
    assert_eq!(done["user"], "root@pam!qfence");
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(current.body["data"]["status"], "stopped");

    phase("stop again is a successful no-op task; shutdown of a stopped VM is a 500");
    let again = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        wait_task(&c, &h, again.body["data"].as_str().unwrap()).await?["exitstatus"],
        "OK"
    );
    let shutdown = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/shutdown",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(shutdown.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shutdown.body["message"], "VM 101 not running\n");

    phase("start: running again; a second start fails inside its task");
    let start = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/start",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        wait_task(&c, &h, start.body["data"].as_str().unwrap()).await?["exitstatus"],
        "OK"
    );
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(current.body["data"]["status"], "running");
    assert!(current.body["data"]["pid"].is_u64());
    let twice = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/start",
        ROOT_TOKEN,
    )
    .await?;
    let failed = wait_task(&c, &h, twice.body["data"].as_str().unwrap()).await?;
    assert_eq!(failed["exitstatus"], "VM 101 already running");

    phase("a locked VM: the stop task fails; a token may not skiplock");
    h.update(|s| s.vms[0].lock = Some("backup".into()));
    let locked = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    let failed = wait_task(&c, &h, locked.body["data"].as_str().unwrap()).await?;
    assert_eq!(failed["exitstatus"], "VM is locked (backup)");
    assert_eq!(h.snapshot().vm(101).unwrap().status, VmStatus::Running);
    let skiplock = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop?skiplock=1",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(skiplock.status, StatusCode::BAD_REQUEST);
    assert!(skiplock.body["errors"]["skiplock"].is_string());

    phase("the task list and log");
    let log = api(
        &c,
        &h,
        Method::GET,
        &format!("/nodes/pve-b/tasks/{upid}/log"),
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        log.body["data"].as_array().unwrap().last().unwrap()["t"],
        "TASK OK"
    );
    let list = api(&c, &h, Method::GET, "/nodes/pve-b/tasks", ROOT_TOKEN).await?;
    assert_eq!(
        find(&list.body["data"], "upid", json!(upid))["status"],
        "OK"
    );
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_offline_node_answers_595_and_its_guests_become_unknown() -> Result<()> {
    let (h, c) = pve(state()).await?;
    h.update(|s| s.nodes[1].reachable = false);

    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(current.status.as_u16(), 595);
    assert_eq!(current.body["message"], "No route to host\n");
    let stop = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(stop.status.as_u16(), 595);
    let status = api(&c, &h, Method::GET, "/cluster/status", ROOT_TOKEN).await?;
    assert_eq!(
        find(&status.body["data"], "name", json!("pve-b"))["online"],
        0
    );
    assert_eq!(
        find(&status.body["data"], "type", json!("cluster"))["quorate"],
        1,
        "2 of 3 still online"
    );
    let resources = api(&c, &h, Method::GET, "/cluster/resources", ROOT_TOKEN).await?;
    assert_eq!(
        find(&resources.body["data"], "vmid", json!(101))["status"],
        "unknown"
    );
    assert_eq!(
        find(&resources.body["data"], "id", json!("node/pve-b"))["status"],
        "offline"
    );
    assert_eq!(
        h.snapshot().vm(101).unwrap().status,
        VmStatus::Running,
        "cut off, not dead"
    );

    phase("two of three nodes gone: no quorum");
    h.update(|s| s.nodes[2].reachable = false);
    let status = api(&c, &h, Method::GET, "/cluster/status", ROOT_TOKEN).await?;
    assert_eq!(
        find(&status.body["data"], "type", json!("cluster"))["quorate"],
        0
    );
    h.update(|s| {
        s.vms
            .push(Vm::new(105, "local", "pve-a", VmStatus::Running))
    });
    let stop = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-a/qemu/105/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(stop.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(stop.body["message"], "cluster not ready - no quorum?\n");
    assert_eq!(h.snapshot().vm(105).unwrap().status, VmStatus::Running);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn permissions_are_enforced_and_dumped_for_the_token_itself() -> Result<()> {
    let (h, c) = pve(state()).await?;

    phase("the privilege-separated token: VM.Audit on /vms/101 only (intersection with its user)");
    let perms = api(
        &c,
        &h,
        Method::GET,
        "/access/permissions?path=/vms/101",
        AUDIT_TOKEN,
    )
    .await?;
    assert_eq!(perms.body["data"], json!({"/vms/101": {"VM.Audit": 0}}));
    let stop = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        AUDIT_TOKEN,
    )
    .await?;
    assert_eq!(stop.status, StatusCode::FORBIDDEN);
    assert_eq!(
        stop.body["message"],
        "Permission check failed (/vms/101, VM.PowerMgmt)\n"
    );
    assert_eq!(h.snapshot().vm(101).unwrap().status, VmStatus::Running);
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        AUDIT_TOKEN,
    )
    .await?;
    assert_eq!(current.status, StatusCode::OK);

    phase("VMs it may not audit are silently left out of the resources");
    let resources = api(
        &c,
        &h,
        Method::GET,
        "/cluster/resources?type=vm",
        AUDIT_TOKEN,
    )
    .await?;
    let ids: Vec<&Value> = resources.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["vmid"])
        .collect();
    assert_eq!(ids, vec![&json!(101)]);
    let cluster = api(&c, &h, Method::GET, "/cluster/status", AUDIT_TOKEN).await?;
    assert_eq!(cluster.status, StatusCode::FORBIDDEN);

    phase("asking about another user needs Sys.Audit on /access");
    let other = api(
        &c,
        &h,
        Method::GET,
        "/access/permissions?userid=root@pam",
        AUDIT_TOKEN,
    )
    .await?;
    assert_eq!(other.status, StatusCode::FORBIDDEN);

    phase("the root token (no privsep) holds everything, propagated");
    let root = api(
        &c,
        &h,
        Method::GET,
        "/access/permissions?path=/vms/101",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(root.body["data"]["/vms/101"]["VM.PowerMgmt"], 1);
    assert_eq!(root.body["data"]["/vms/101"]["VM.Audit"], 1);
    let all = api(&c, &h, Method::GET, "/access/permissions", ROOT_TOKEN).await?;
    assert_eq!(all.body["data"]["/"]["Sys.Audit"], 1);
    h.shutdown().await;
    Ok(())
}

fn replicated_state(interval: Duration) -> PveState {
    let mut s = state();
    s.remote_nodes.insert("pve-dc2-01".into(), true);
    s.replication
        .push(ReplicationJob::new("101-1", 101, "pve-dc2-01", interval));
    s
}

async fn job(c: &Client, h: &PveHandle) -> Result<Reply> {
    api(
        c,
        h,
        Method::GET,
        "/nodes/pve-b/replication/101-1/status",
        ROOT_TOKEN,
    )
    .await
}

#[tokio::test]
async fn replication_syncs_on_schedule_and_reports_failures_like_pve() -> Result<()> {
    let (h, c) = pve(replicated_state(Duration::from_millis(500))).await?;

    phase("the configuration lists the job; its status carries PVE's fields");
    let config = api(&c, &h, Method::GET, "/cluster/replication", ROOT_TOKEN).await?;
    let entry = find(&config.body["data"], "id", json!("101-1"));
    assert_eq!(
        (
            entry["guest"].clone(),
            entry["target"].clone(),
            entry["type"].clone()
        ),
        (json!(101), json!("pve-dc2-01"), json!("local"))
    );
    assert_eq!(entry["jobnum"], 1);
    let first = eventually(Duration::from_secs(10), "a first sync", || async {
        let r = job(&c, &h).await?;
        Ok((r.body["data"]["last_sync"].as_u64().unwrap_or(0) > 0).then_some(r))
    })
    .await?;
    let s = &first.body["data"];
    for key in [
        "last_sync",
        "last_try",
        "duration",
        "fail_count",
        "next_sync",
        "id",
        "guest",
        "target",
        "schedule",
    ] {
        assert!(s.get(key).is_some(), "status lacks {key}: {s}");
    }
    assert_eq!(s["fail_count"], 0);
    assert!(s.get("error").is_none());
    assert!(s["next_sync"].as_u64() >= s["last_sync"].as_u64());
    let listed = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/replication?guest=101",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1);
    let elsewhere = api(&c, &h, Method::GET, "/nodes/pve-a/replication", ROOT_TOKEN).await?;
    assert_eq!(
        elsewhere.body["data"],
        json!([]),
        "only the guest's node has the state"
    );

    phase("the target becomes unreachable: fail_count rises, error is set, last_sync ages");
    h.update(|st| st.remote_nodes.insert("pve-dc2-01".into(), false));
    // Read after the cut: a sync may have landed since the first read.
    let synced = h.snapshot().replication[0].status.last_sync;
    assert!(synced >= s["last_sync"].as_u64().unwrap());
    let failing = eventually(Duration::from_secs(10), "two failed attempts", || async {
        let r = job(&c, &h).await?;
        Ok((r.body["data"]["fail_count"].as_u64().unwrap_or(0) >= 2).then_some(r))
    })
    .await?;
    assert_eq!(failing.body["data"]["last_sync"], synced);
    assert!(
        failing.body["data"]["error"]
            .as_str()
            .unwrap()
            .contains("exit code 255")
    );
    assert!(failing.body["data"]["last_try"].as_u64() >= Some(synced));

    phase("the target is back: the next attempt succeeds and clears the failure");
    h.update(|st| st.remote_nodes.insert("pve-dc2-01".into(), true));
    api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/replication/101-1/schedule_now",
        ROOT_TOKEN,
    )
    .await?;
    let healed = eventually(Duration::from_secs(10), "a sync after healing", || async {
        let r = job(&c, &h).await?;
        Ok((r.body["data"]["fail_count"] == 0).then_some(r))
    })
    .await?;
    assert!(healed.body["data"]["last_sync"].as_u64() >= Some(synced));
    assert!(healed.body["data"].get("error").is_none());

    phase("the guest's node goes offline: the status can no longer be read (595)");
    h.update(|st| st.nodes[1].reachable = false);
    assert_eq!(job(&c, &h).await?.status.as_u16(), 595);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn flapping_replication_alternates_failures_and_successes() -> Result<()> {
    // Each state lasts at least a second, so sampling cannot miss one under load.
    let mut s = replicated_state(Duration::from_secs(1));
    s.replication[0].flapping = Some(Flapping {
        fail: 2,
        succeed: 1,
    });
    let (h, c) = pve(s).await?;
    let mut seen_fail_counts = std::collections::BTreeSet::new();
    let mut recovered_after_failing = false;
    let mut last = 0;
    for _ in 0..300 {
        let r = job(&c, &h).await?;
        let fails = r.body["data"]["fail_count"].as_u64().unwrap_or(0);
        seen_fail_counts.insert(fails);
        if fails == 0 && last > 0 {
            recovered_after_failing = true;
        }
        last = fails;
        if recovered_after_failing && seen_fail_counts.contains(&1) && seen_fail_counts.contains(&2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_fail_counts.contains(&1) && seen_fail_counts.contains(&2),
        "{seen_fail_counts:?}"
    );
    assert!(
        recovered_after_failing,
        "a success must follow the failures"
    );
    assert!(
        !seen_fail_counts.contains(&3),
        "never more than `fail` in a row: {seen_fail_counts:?}"
    );
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn reset_reboot_node_status_job_config_and_ticket_renewal() -> Result<()> {
    let (h, c) = pve(replicated_state(Duration::from_secs(60))).await?;

    phase("reset and reboot keep a running VM running with a new QEMU process");
    let pid_before = h.snapshot().vm(101).unwrap().pid;
    for action in ["reset", "reboot"] {
        let r = api(
            &c,
            &h,
            Method::POST,
            &format!("/nodes/pve-b/qemu/101/status/{action}"),
            ROOT_TOKEN,
        )
        .await?;
        let done = wait_task(&c, &h, r.body["data"].as_str().unwrap()).await?;
        assert_eq!(done["exitstatus"], "OK");
        assert_eq!(done["type"], format!("qm{action}"));
    }
    let vm = h.snapshot().vm(101).unwrap().clone();
    assert_eq!(vm.status, VmStatus::Running);
    assert_ne!(vm.pid, pid_before);
    let stopped = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/102/status/reboot",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(stopped.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(stopped.body["message"], "VM 102 not running\n");

    phase("node status and one job's configuration");
    let node = api(&c, &h, Method::GET, "/nodes/pve-b/status", ROOT_TOKEN).await?;
    assert!(
        node.body["data"]["pveversion"]
            .as_str()
            .unwrap()
            .starts_with("pve-manager/9.0.10")
    );
    let config = api(
        &c,
        &h,
        Method::GET,
        "/cluster/replication/101-1",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(config.body["data"]["target"], "pve-dc2-01");
    assert_eq!(config.body["data"]["source"], "pve-b");
    let missing = api(
        &c,
        &h,
        Method::GET,
        "/cluster/replication/101-9",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(missing.status, StatusCode::INTERNAL_SERVER_ERROR);

    phase("a ticket renews with itself as the password; a forged one is refused");
    let base = format!("{}/api2/json", h.base_url());
    let login = |user: &str, password: &str| {
        c.post(format!("{base}/access/ticket"))
            .json(&json!({"username": user, "password": password}))
    };
    let first = call(login("root@pam", "secret")).await?;
    let ticket = first.body["data"]["ticket"].as_str().unwrap().to_owned();
    let renewed = call(login("root@pam", &ticket)).await?;
    assert_eq!(renewed.status, StatusCode::OK);
    assert_ne!(renewed.body["data"]["ticket"].as_str().unwrap(), ticket);
    let forged = call(
        c.get(format!("{base}/version"))
            .header("Cookie", "PVEAuthCookie=PVE:root@pam:00000000::forged"),
    )
    .await?;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_ha_managed_vm_is_stopped_by_the_ha_stack_after_the_task_says_ok() -> Result<()> {
    let mut s = state();
    s.vms[0].ha = Some(HaService::started());
    s.ha_delay = Duration::from_millis(1500);
    let (h, c) = pve(s).await?;

    phase("the VM is an HA resource, started");
    let resources = api(&c, &h, Method::GET, "/cluster/ha/resources", ROOT_TOKEN).await?;
    assert_eq!(resources.body["data"][0]["sid"], "vm:101");
    assert_eq!(resources.body["data"][0]["state"], "started");
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        current.body["data"]["ha"],
        json!({"managed": 1, "state": "started"})
    );

    phase("stop: an hastop task that ends OK at once, while the VM still runs");
    let stop = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/stop",
        ROOT_TOKEN,
    )
    .await?;
    let upid = stop.body["data"].as_str().unwrap().to_owned();
    assert!(upid.contains(":hastop:101:"), "{upid}");
    let task = task_status(&c, &h, &upid).await?;
    assert_eq!(
        (task["status"].clone(), task["exitstatus"].clone()),
        (json!("stopped"), json!("OK"))
    );
    let current = api(
        &c,
        &h,
        Method::GET,
        "/nodes/pve-b/qemu/101/status/current",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        current.body["data"]["status"], "running",
        "OK on hastop only means queued"
    );
    assert_eq!(current.body["data"]["ha"]["state"], "request_stop");
    let status = api(
        &c,
        &h,
        Method::GET,
        "/cluster/ha/status/current",
        ROOT_TOKEN,
    )
    .await?;
    let service = find(&status.body["data"], "sid", json!("vm:101"));
    assert_eq!(service["request_state"], "stopped");

    phase("the HA stack stops it later; the requested state is now stopped");
    eventually(Duration::from_secs(10), "VM 101 stopped by HA", || async {
        let r = api(
            &c,
            &h,
            Method::GET,
            "/nodes/pve-b/qemu/101/status/current",
            ROOT_TOKEN,
        )
        .await?;
        Ok((r.body["data"]["status"] == "stopped").then_some(r))
    })
    .await
    .map(|r| assert_eq!(r.body["data"]["ha"]["state"], "stopped"))?;
    let one = api(
        &c,
        &h,
        Method::GET,
        "/cluster/ha/resources/vm:101",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(one.body["data"]["state"], "stopped");

    phase("start goes through hastart the same way");
    let start = api(
        &c,
        &h,
        Method::POST,
        "/nodes/pve-b/qemu/101/status/start",
        ROOT_TOKEN,
    )
    .await?;
    assert!(
        start.body["data"]
            .as_str()
            .unwrap()
            .contains(":hastart:101:")
    );
    eventually(Duration::from_secs(10), "VM 101 started by HA", || async {
        Ok((h.snapshot().vm(101).unwrap().status == VmStatus::Running).then_some(()))
    })
    .await?;

    phase("its node loses power: the service waits for fencing");
    h.set_node_powered("pve-b", false);
    assert_eq!(
        h.snapshot().vm(101).unwrap().ha.as_ref().unwrap().crm_state,
        "fence"
    );
    let resources = api(
        &c,
        &h,
        Method::GET,
        "/cluster/resources?type=vm",
        ROOT_TOKEN,
    )
    .await?;
    assert_eq!(
        find(&resources.body["data"], "vmid", json!(101))["hastate"],
        "fence"
    );
    h.shutdown().await;
    Ok(())
}
