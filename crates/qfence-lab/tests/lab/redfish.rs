//! The Redfish BMC simulator: discovery, power with read-back, the vendor answers to a
//! reset that changes nothing, sessions, and privileges a driver can grade.

use std::time::Duration;

use anyhow::Result;
use qfence_lab::TlsIdentity;
use qfence_lab::redfish::{
    self, Account, AlreadyInState, BmcHandle, BmcState, PowerState, ResetReply, Role, System,
};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Reply, call, client, eventually, loopback, phase, req};

const UUID_A: &str = "5b7e4f10-0001-4c2a-9d5e-000000000001";
const UUID_B: &str = "5b7e4f10-0002-4c2a-9d5e-000000000002";

fn accounts() -> Vec<Account> {
    vec![
        Account::new("admin", "admin-pw", Role::Administrator),
        Account::new("fencer", "fencer-pw", Role::Operator),
        Account::new("viewer", "viewer-pw", Role::ReadOnly),
    ]
}

/// A BMC with two hosts and the three standard roles.
async fn bmc(delay: Duration) -> Result<(BmcHandle, Client)> {
    let tls = TlsIdentity::loopback()?;
    let pem = tls.cert_pem().to_owned();
    let mut state = BmcState::new(
        vec![
            System::new("pve-dc1-01", UUID_A),
            System::new("pve-dc1-02", UUID_B),
        ],
        accounts(),
    );
    state.power_delay = delay;
    let handle = redfish::start(loopback(), tls, state).await?;
    Ok((handle, client(&pem)))
}

async fn get(c: &Client, h: &BmcHandle, path: &str, user: &str, pw: &str) -> Result<Reply> {
    call(req(c, Method::GET, &h.base_url(), path).basic_auth(user, Some(pw))).await
}

async fn reset(
    c: &Client,
    h: &BmcHandle,
    system: &str,
    user: &str,
    pw: &str,
    body: Value,
) -> Result<Reply> {
    let path = format!("/redfish/v1/Systems/{system}/Actions/ComputerSystem.Reset");
    call(
        req(c, Method::POST, &h.base_url(), &path)
            .basic_auth(user, Some(pw))
            .json(&body),
    )
    .await
}

async fn power(c: &Client, h: &BmcHandle, system: &str) -> Result<String> {
    let reply = get(
        c,
        h,
        &format!("/redfish/v1/Systems/{system}"),
        "admin",
        "admin-pw",
    )
    .await?;
    Ok(reply.body["PowerState"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

fn message_id(reply: &Reply) -> String {
    reply.body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn service_root_is_open_and_everything_else_needs_credentials() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;

    phase("the service root answers without credentials");
    let root = call(req(&c, Method::GET, &h.base_url(), "/redfish/v1/")).await?;
    assert_eq!(root.status, StatusCode::OK);
    assert_eq!(root.body["UUID"], json!(h.snapshot().service_uuid));
    assert_eq!(root.body["Systems"]["@odata.id"], "/redfish/v1/Systems");
    assert_eq!(
        root.body["Links"]["Sessions"]["@odata.id"],
        "/redfish/v1/SessionService/Sessions"
    );
    assert_eq!(root.header("OData-Version").as_deref(), Some("4.0"));
    let version = call(req(&c, Method::GET, &h.base_url(), "/redfish")).await?;
    assert_eq!(version.body, json!({"v1": "/redfish/v1/"}));

    phase("the systems need credentials: 401 with WWW-Authenticate and a Redfish error");
    let anonymous = call(req(&c, Method::GET, &h.base_url(), "/redfish/v1/Systems")).await?;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert!(
        anonymous
            .header("WWW-Authenticate")
            .is_some_and(|v| v.starts_with("Basic"))
    );
    assert!(anonymous.body["error"]["message"].is_string());
    assert!(anonymous.body["error"]["code"].is_string());
    let wrong = get(&c, &h, "/redfish/v1/Systems", "admin", "nope").await?;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);

    phase("unknown resources are a Redfish 404");
    let missing = get(&c, &h, "/redfish/v1/Systems/nope", "admin", "admin-pw").await?;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(message_id(&missing), "Base.1.8.ResourceNotFound");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn systems_are_listed_with_identity_and_the_reset_action() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;
    let systems = get(&c, &h, "/redfish/v1/Systems", "viewer", "viewer-pw").await?;
    assert_eq!(systems.status, StatusCode::OK);
    assert_eq!(systems.body["Members@odata.count"], 2);
    assert_eq!(
        systems.body["Members"][1]["@odata.id"],
        "/redfish/v1/Systems/pve-dc1-02"
    );

    let system = get(
        &c,
        &h,
        "/redfish/v1/Systems/pve-dc1-01/",
        "viewer",
        "viewer-pw",
    )
    .await?;
    assert_eq!(
        system.status,
        StatusCode::OK,
        "a trailing slash is accepted"
    );
    let body = &system.body;
    assert_eq!(body["Id"], "pve-dc1-01");
    assert_eq!(body["UUID"], UUID_A);
    assert_eq!(body["Name"], "pve-dc1-01");
    assert_eq!(body["PowerState"], "On");
    let action = &body["Actions"]["#ComputerSystem.Reset"];
    assert_eq!(
        action["target"],
        "/redfish/v1/Systems/pve-dc1-01/Actions/ComputerSystem.Reset"
    );
    let allowed: Vec<&str> = action["ResetType@Redfish.AllowableValues"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(allowed.contains(&"ForceOff") && allowed.contains(&"On"));

    let info = get(
        &c,
        &h,
        action["@Redfish.ActionInfo"].as_str().unwrap(),
        "viewer",
        "viewer-pw",
    )
    .await?;
    assert_eq!(info.body["Parameters"][0]["Name"], "ResetType");
    assert!(
        info.body["Parameters"][0]["AllowableValues"]
            .as_array()
            .unwrap()
            .contains(&json!("ForceOff"))
    );

    phase("the manager says which servers it manages; each chassis mirrors its system's power");
    let managers = get(&c, &h, "/redfish/v1/Managers", "viewer", "viewer-pw").await?;
    let manager_path = managers.body["Members"][0]["@odata.id"]
        .as_str()
        .unwrap()
        .to_owned();
    let manager = get(&c, &h, &manager_path, "viewer", "viewer-pw").await?;
    assert_eq!(manager.body["ManagerType"], "BMC");
    assert_eq!(
        manager.body["Links"]["ManagerForServers"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let chassis = get(
        &c,
        &h,
        "/redfish/v1/Chassis/pve-dc1-02",
        "viewer",
        "viewer-pw",
    )
    .await?;
    assert_eq!(chassis.body["PowerState"], "On");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn force_off_is_accepted_at_once_and_only_read_back_shows_off() -> Result<()> {
    let (h, c) = bmc(Duration::from_millis(1000)).await?;

    phase("ForceOff: 204, then PoweringOff, then Off after the power delay");
    let accepted = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(accepted.status, StatusCode::NO_CONTENT);
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "PoweringOff");
    eventually(Duration::from_secs(10), "PowerState Off", || async {
        Ok((power(&c, &h, "pve-dc1-01").await? == "Off").then_some(()))
    })
    .await?;
    assert_eq!(
        power(&c, &h, "pve-dc1-02").await?,
        "On",
        "the other host is untouched"
    );
    assert_eq!(
        h.snapshot().system("pve-dc1-01").unwrap().power,
        PowerState::Off
    );

    phase("On: PoweringOn, then On");
    reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "On"}),
    )
    .await?;
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "PoweringOn");
    eventually(Duration::from_secs(10), "PowerState On", || async {
        Ok((power(&c, &h, "pve-dc1-01").await? == "On").then_some(()))
    })
    .await?;

    phase("a slow BMC (fault) is still PoweringOff long after the request");
    h.update(|s| s.power_delay = Duration::from_secs(3));
    reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "PoweringOff");

    phase("a newer reset supersedes the pending one");
    h.update(|s| s.power_delay = Duration::from_millis(100));
    reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "On"}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "On");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_reset_that_changes_nothing_gets_the_configured_vendor_answer() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;
    h.set_power("pve-dc1-01", PowerState::Off);

    phase("by default ForceOff on an off host is accepted (204) and changes nothing");
    let r = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "Off");

    phase("iDRAC-like: 409 Conflict with a Redfish error");
    h.update(|s| s.already_in_state = AlreadyInState::Conflict409);
    let r = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(
        r.body["error"]["@Message.ExtendedInfo"][0]["Message"]
            .as_str()
            .unwrap()
            .contains("already powered OFF")
    );
    assert_eq!(
        power(&c, &h, "pve-dc1-01").await?,
        "Off",
        "a 409 must not change the resource"
    );
    let on_when_on = reset(
        &c,
        &h,
        "pve-dc1-02",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "On"}),
    )
    .await?;
    assert_eq!(on_when_on.status, StatusCode::CONFLICT);

    phase("iLO-like: 400 InvalidOperationForSystemState, also for ForceRestart when off");
    h.update(|s| s.already_in_state = AlreadyInState::BadRequest400);
    let r = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceRestart"}),
    )
    .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(message_id(&r), "iLO.2.14.InvalidOperationForSystemState");
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "Off");

    phase("a reset that does change something is still accepted");
    let r = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "On"}),
    )
    .await?;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "On");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn malformed_resets_are_rejected_without_effect() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;
    let missing = reset(&c, &h, "pve-dc1-01", "admin", "admin-pw", json!({})).await?;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(message_id(&missing), "Base.1.8.ActionParameterMissing");
    let bogus = reset(
        &c,
        &h,
        "pve-dc1-01",
        "admin",
        "admin-pw",
        json!({"ResetType": "Bogus"}),
    )
    .await?;
    assert_eq!(bogus.status, StatusCode::BAD_REQUEST);
    assert_eq!(message_id(&bogus), "Base.1.8.ActionParameterValueNotInList");
    let path = "/redfish/v1/Systems/pve-dc1-01/Actions/ComputerSystem.Reset";
    let garbage = call(
        req(&c, Method::POST, &h.base_url(), path)
            .basic_auth("admin", Some("admin-pw"))
            .body("{not json"),
    )
    .await?;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
    let unknown = reset(
        &c,
        &h,
        "nope",
        "admin",
        "admin-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "On");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn sessions_log_in_carry_roles_log_out_and_are_limited() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;
    let sessions = "/redfish/v1/SessionService/Sessions";

    phase("bad credentials: 401");
    let bad = call(
        req(&c, Method::POST, &h.base_url(), sessions)
            .json(&json!({"UserName": "fencer", "Password": "x"})),
    )
    .await?;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);

    phase("log in: 201 with X-Auth-Token, Location and the session's Roles");
    let login = call(
        req(&c, Method::POST, &h.base_url(), sessions)
            .json(&json!({"UserName": "fencer", "Password": "fencer-pw"})),
    )
    .await?;
    assert_eq!(login.status, StatusCode::CREATED);
    let token = login.header("X-Auth-Token").expect("X-Auth-Token");
    let location = login.header("Location").expect("Location");
    assert_eq!(login.body["@odata.id"], json!(location));
    assert_eq!(login.body["Roles"], json!(["Operator"]));

    phase("the token works for reads and for the reset");
    let system = call(
        req(
            &c,
            Method::GET,
            &h.base_url(),
            "/redfish/v1/Systems/pve-dc1-01",
        )
        .header("X-Auth-Token", &token),
    )
    .await?;
    assert_eq!(system.status, StatusCode::OK);
    let own =
        call(req(&c, Method::GET, &h.base_url(), &location).header("X-Auth-Token", &token)).await?;
    assert_eq!(own.body["UserName"], "fencer");
    let off = call(
        req(
            &c,
            Method::POST,
            &h.base_url(),
            "/redfish/v1/Systems/pve-dc1-01/Actions/ComputerSystem.Reset",
        )
        .header("X-Auth-Token", &token)
        .json(&json!({"ResetType": "ForceOff"})),
    )
    .await?;
    assert_eq!(off.status, StatusCode::NO_CONTENT);

    phase("log out: DELETE, then the token is refused with NoValidSession");
    let out =
        call(req(&c, Method::DELETE, &h.base_url(), &location).header("X-Auth-Token", &token))
            .await?;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(h.snapshot().sessions.is_empty());
    let after = call(
        req(&c, Method::GET, &h.base_url(), "/redfish/v1/Systems").header("X-Auth-Token", &token),
    )
    .await?;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert_eq!(message_id(&after), "Base.1.8.NoValidSession");

    phase("a BMC with few sessions refuses the one too many: 503 SessionLimitExceeded");
    h.update(|s| s.max_sessions = 2);
    for _ in 0..2 {
        let ok = call(
            req(&c, Method::POST, &h.base_url(), sessions)
                .json(&json!({"UserName": "viewer", "Password": "viewer-pw"})),
        )
        .await?;
        assert_eq!(ok.status, StatusCode::CREATED);
    }
    let full = call(
        req(&c, Method::POST, &h.base_url(), sessions)
            .json(&json!({"UserName": "viewer", "Password": "viewer-pw"})),
    )
    .await?;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(message_id(&full), "Base.1.8.SessionLimitExceeded");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn privileges_are_enforced_and_readable_for_grading() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;

    phase("ReadOnly may not reset: 403 InsufficientPrivilege, and nothing changes");
    let denied = reset(
        &c,
        &h,
        "pve-dc1-01",
        "viewer",
        "viewer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(message_id(&denied), "Base.1.8.InsufficientPrivilege");
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "On");

    phase("an account finds itself in Accounts and reads its own role (not others')");
    let list = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Accounts",
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert_eq!(list.body["Members@odata.count"], 3);
    let own = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Accounts/2",
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert_eq!(own.body["UserName"], "fencer");
    assert_eq!(own.body["RoleId"], "Operator");
    let other = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Accounts/1",
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    let admin_reads = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Accounts/2",
        "admin",
        "admin-pw",
    )
    .await?;
    assert_eq!(admin_reads.status, StatusCode::OK);
    let role = get(
        &c,
        &h,
        own.body["Links"]["Role"]["@odata.id"].as_str().unwrap(),
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert!(
        role.body["AssignedPrivileges"]
            .as_array()
            .unwrap()
            .contains(&json!("ConfigureComponents"))
    );
    let readonly = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Roles/ReadOnly",
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert!(
        !readonly.body["AssignedPrivileges"]
            .as_array()
            .unwrap()
            .contains(&json!("ConfigureComponents"))
    );

    phase(
        "the published privilege map says ComputerSystem POST needs ConfigureComponents (\"proven\")",
    );
    let service = get(&c, &h, "/redfish/v1/AccountService", "fencer", "fencer-pw").await?;
    let map_path = service.body["PrivilegeMap"]["@odata.id"]
        .as_str()
        .expect("PrivilegeMap link")
        .to_owned();
    let map = get(&c, &h, &map_path, "fencer", "fencer-pw").await?;
    let system_ops = map.body["Mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Entity"] == "ComputerSystem")
        .expect("ComputerSystem mapping");
    assert_eq!(
        system_ops["OperationMap"]["POST"][0]["Privilege"],
        json!(["ConfigureComponents"])
    );

    phase("without the map, a driver can only infer");
    h.update(|s| s.publish_privilege_map = false);
    let service = get(&c, &h, "/redfish/v1/AccountService", "fencer", "fencer-pw").await?;
    assert!(service.body.get("PrivilegeMap").is_none());
    assert_eq!(
        get(&c, &h, &map_path, "fencer", "fencer-pw").await?.status,
        StatusCode::NOT_FOUND
    );
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_start_with_a_bad_state_is_refused() -> Result<()> {
    let tls = TlsIdentity::loopback()?;
    let state = BmcState::new(
        vec![System::new("same", UUID_A), System::new("same", UUID_B)],
        accounts(),
    );
    let error = redfish::start(loopback(), tls, state).await.unwrap_err();
    assert!(
        error.to_string().contains("\"same\" appears twice"),
        "{error}"
    );
    Ok(())
}

#[tokio::test]
async fn an_asynchronous_bmc_answers_202_with_a_task_monitor() -> Result<()> {
    let (h, c) = bmc(Duration::from_millis(1000)).await?;
    h.update(|s| s.reset_reply = ResetReply::TaskMonitor);

    phase("ForceOff: 202, Location = a task monitor, Retry-After, a Task body");
    let accepted = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    let monitor = accepted.header("Location").expect("Location");
    assert!(accepted.header("Retry-After").is_some());
    assert_eq!(accepted.body["TaskState"], "Running");

    phase("the monitor answers 202 while the power is going, then 204; the task reads Completed");
    let running = get(&c, &h, &monitor, "fencer", "fencer-pw").await?;
    assert_eq!(running.status, StatusCode::ACCEPTED);
    let task_path = running.body["@odata.id"].as_str().unwrap().to_owned();
    eventually(
        Duration::from_secs(10),
        "the monitor's final answer",
        || async {
            let r = get(&c, &h, &monitor, "fencer", "fencer-pw").await?;
            Ok((r.status == StatusCode::NO_CONTENT).then_some(()))
        },
    )
    .await?;
    assert_eq!(power(&c, &h, "pve-dc1-01").await?, "Off");
    let task = get(&c, &h, &task_path, "fencer", "fencer-pw").await?;
    assert_eq!(
        (
            task.body["TaskState"].clone(),
            task.body["TaskStatus"].clone()
        ),
        (json!("Completed"), json!("OK"))
    );

    phase("a reset superseded before it finished reads Cancelled");
    let first = reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "On"}),
    )
    .await?;
    reset(
        &c,
        &h,
        "pve-dc1-01",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    let superseded = get(
        &c,
        &h,
        &first.header("Location").unwrap(),
        "fencer",
        "fencer-pw",
    )
    .await?;
    assert_eq!(superseded.status, StatusCode::OK);
    assert_eq!(superseded.body["TaskState"], "Cancelled");
    h.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_remaining_collections_and_services_answer() -> Result<()> {
    let (h, c) = bmc(Duration::ZERO).await?;

    let chassis = get(&c, &h, "/redfish/v1/Chassis", "viewer", "viewer-pw").await?;
    assert_eq!(chassis.body["Members@odata.count"], 2);
    let roles = get(
        &c,
        &h,
        "/redfish/v1/AccountService/Roles",
        "viewer",
        "viewer-pw",
    )
    .await?;
    assert_eq!(roles.body["Members@odata.count"], 3);
    let sessions = get(&c, &h, "/redfish/v1/SessionService", "viewer", "viewer-pw").await?;
    assert_eq!(sessions.body["ServiceEnabled"], true);
    assert_eq!(
        sessions.body["Sessions"]["@odata.id"],
        "/redfish/v1/SessionService/Sessions"
    );
    let tasks = get(&c, &h, "/redfish/v1/TaskService", "viewer", "viewer-pw").await?;
    assert_eq!(
        tasks.body["Tasks"]["@odata.id"],
        "/redfish/v1/TaskService/Tasks"
    );

    phase("a session collection shows one's own sessions; an administrator sees all");
    let path = "/redfish/v1/SessionService/Sessions";
    for (user, pw) in [("viewer", "viewer-pw"), ("fencer", "fencer-pw")] {
        let login = call(
            req(&c, Method::POST, &h.base_url(), path)
                .json(&json!({"UserName": user, "Password": pw})),
        )
        .await?;
        assert_eq!(login.status, StatusCode::CREATED);
    }
    let own = get(&c, &h, path, "viewer", "viewer-pw").await?;
    assert_eq!(own.body["Members@odata.count"], 1);
    let all = get(&c, &h, path, "admin", "admin-pw").await?;
    assert_eq!(all.body["Members@odata.count"], 2);
    let fencer_session = h
        .snapshot()
        .sessions
        .iter()
        .find(|s| s.user_name == "fencer")
        .unwrap()
        .id
        .clone();
    let foreign = call(
        req(
            &c,
            Method::DELETE,
            &h.base_url(),
            &format!("{path}/{fencer_session}"),
        )
        .basic_auth("viewer", Some("viewer-pw")),
    )
    .await?;
    assert_eq!(
        foreign.status,
        StatusCode::FORBIDDEN,
        "not one's own session"
    );

    phase("a reset handed out as a task shows in the task collection");
    h.update(|s| s.reset_reply = ResetReply::TaskMonitor);
    let accepted = reset(
        &c,
        &h,
        "pve-dc1-02",
        "fencer",
        "fencer-pw",
        json!({"ResetType": "ForceOff"}),
    )
    .await?;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    let list = get(
        &c,
        &h,
        "/redfish/v1/TaskService/Tasks",
        "viewer",
        "viewer-pw",
    )
    .await?;
    assert_eq!(
        list.body["Members"][0]["@odata.id"],
        accepted.body["@odata.id"]
    );
    let wrong_method = call(
        req(&c, Method::DELETE, &h.base_url(), "/redfish/v1/Systems")
            .basic_auth("admin", Some("admin-pw")),
    )
    .await?;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    h.shutdown().await;
    Ok(())
}
