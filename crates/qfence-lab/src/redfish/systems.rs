//! The service root, the systems and their reset action, the chassis and the managers.

use super::*;

pub(super) async fn service_root(State(shared): Shr) -> Response {
    let state = shared.lock();
    json_ok(json!({
        "@odata.id": "/redfish/v1",
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": state.service_uuid,
        "Vendor": "qfence lab",
        "Product": "qfence lab BMC simulator",
        "Systems": link("/redfish/v1/Systems"),
        "Chassis": link("/redfish/v1/Chassis"),
        "Managers": link("/redfish/v1/Managers"),
        "SessionService": link("/redfish/v1/SessionService"),
        "AccountService": link("/redfish/v1/AccountService"),
        "TaskService": link("/redfish/v1/TaskService"),
        "Links": {"Sessions": link("/redfish/v1/SessionService/Sessions")},
    }))
}

/// A collection with one member a system, under `path`: every system is its own chassis
/// too, so the Systems and the Chassis collections list the same ids.
fn per_system_collection(shared: &Shared, path: &str, odata_type: &str, name: &str) -> Response {
    let members = shared
        .lock()
        .systems
        .iter()
        .map(|s| format!("{path}/{}", s.id))
        .collect();
    collection(path, odata_type, name, members)
}

pub(super) async fn systems(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    per_system_collection(
        &shared,
        "/redfish/v1/Systems",
        "#ComputerSystemCollection.ComputerSystemCollection",
        "Computer System Collection",
    )
}

pub(super) fn system_body(state: &BmcState, system: &System) -> Value {
    let base = format!("/redfish/v1/Systems/{}", system.id);
    let health_state = if system.power == PowerState::Off {
        "StandbyOffline"
    } else {
        "Enabled"
    };
    json!({
        "@odata.id": base,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": system.id,
        "Name": system.name,
        "UUID": system.uuid,
        "SerialNumber": system.serial_number,
        "HostName": system.host_name,
        "Manufacturer": "qfence lab",
        "Model": "Simulated host",
        "SystemType": "Physical",
        "PowerState": system.power.as_str(),
        "PowerRestorePolicy": "LastState",
        "Status": {"State": health_state, "Health": "OK"},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{base}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": RESET_TYPES,
                "@Redfish.ActionInfo": format!("{base}/ResetActionInfo"),
            }
        },
        "Links": {
            "Chassis": [link(&format!("/redfish/v1/Chassis/{}", system.id))],
            "ManagedBy": [link(&format!("/redfish/v1/Managers/{}", state.manager_id))],
        },
    })
}

pub(super) async fn system(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    match state.system(&id) {
        Some(system) => json_ok(system_body(&state, system)),
        None => not_found("ComputerSystem", &id),
    }
}

pub(super) async fn reset_action_info(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    if shared.lock().system(&id).is_none() {
        return not_found("ComputerSystem", &id);
    }
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Systems/{id}/ResetActionInfo"),
        "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": RESET_TYPES,
        }],
    }))
}

/// What a reset does, as a list of power states reached one `power_delay` apart.
pub(super) fn reset_steps(reset_type: &str, current: PowerState) -> Vec<PowerState> {
    use PowerState::{Off, On};
    let on = current.powered();
    match reset_type {
        "ForceOff" | "GracefulShutdown" => vec![Off],
        "On" | "ForceOn" => vec![On],
        // A restart of an off host powers it on; PowerCycle of an off host powers it on too
        // (DMTF), which is why it is no fence primitive.
        "ForceRestart" | "GracefulRestart" | "PowerCycle" if on => vec![Off, On],
        "ForceRestart" | "GracefulRestart" | "PowerCycle" => vec![On],
        _ => vec![],
    }
}

/// Whether `reset_type` would leave the power as it is (the case vendors answer 409/400).
pub(super) fn changes_nothing(reset_type: &str, current: PowerState) -> bool {
    match reset_type {
        "ForceOff" | "GracefulShutdown" => current == PowerState::Off,
        "On" | "ForceOn" => current == PowerState::On,
        "ForceRestart" | "GracefulRestart" => current == PowerState::Off,
        _ => false,
    }
}

pub(super) async fn reset(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    authorized!(shared, headers, "ConfigureComponents");
    let (current, delay, already, reply) = {
        let state = shared.lock();
        let Some(system) = state.system(&id) else {
            return not_found("ComputerSystem", &id);
        };
        (
            system.power,
            state.power_delay,
            state.already_in_state,
            state.reset_reply,
        )
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.MalformedJSON",
            "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        );
    };
    let Some(reset_type) = request.get("ResetType").and_then(Value::as_str) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
        );
    };
    if !RESET_TYPES.contains(&reset_type) {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterValueNotInList",
            &format!(
                "The value '{reset_type}' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."
            ),
        );
    }
    if changes_nothing(reset_type, current) {
        let off = current == PowerState::Off;
        match already {
            AlreadyInState::Accept => return StatusCode::NO_CONTENT.into_response(),
            AlreadyInState::Conflict409 => {
                let (id, text) = if off {
                    ("IDRAC.2.8.PSU501", "Server is already powered OFF.")
                } else {
                    ("IDRAC.2.8.PSU502", "Server is already powered ON.")
                };
                return rf_error(StatusCode::CONFLICT, id, text);
            }
            AlreadyInState::BadRequest400 => {
                let text = if off { "Power is off." } else { "Power is on." };
                return rf_error(
                    StatusCode::BAD_REQUEST,
                    "iLO.2.14.InvalidOperationForSystemState",
                    text,
                );
            }
        }
    }
    let steps = reset_steps(reset_type, current);
    tracing::debug!(system = %id, reset_type, ?steps, "Simulated BMC accepted a reset");
    let generation = schedule_power(&shared, &id, steps, delay);
    if reply == ResetReply::NoContent {
        return StatusCode::NO_CONTENT.into_response();
    }
    let task_id = random_hex(6);
    shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(task_id.clone(), (id.clone(), generation));
    let body = task_body(&shared, &task_id).unwrap_or(Value::Null);
    let mut response = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("/redfish/v1/TaskService/TaskMonitors/{task_id}"))
    {
        headers.insert(header::LOCATION, v);
    }
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Applies `steps` one `delay` apart, showing the transitional state in between; a newer
/// reset of the same system supersedes what is left.
pub(super) fn schedule_power(
    shared: &Arc<Shared>,
    id: &str,
    steps: Vec<PowerState>,
    delay: Duration,
) -> u64 {
    let generation = shared.next_generation(id);
    if steps.is_empty() || delay.is_zero() {
        for step in steps {
            shared.set_power(id, step);
        }
        shared.complete(id, generation);
        return generation;
    }
    let transitional = |to: PowerState| {
        if to == PowerState::Off {
            PowerState::PoweringOff
        } else {
            PowerState::PoweringOn
        }
    };
    shared.set_power(id, transitional(steps[0]));
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        let last = steps.len() - 1;
        for (i, step) in steps.iter().enumerate() {
            tokio::time::sleep(delay).await;
            if !shared.is_current(&id, generation) {
                return;
            }
            shared.set_power(&id, *step);
            if i < last {
                shared.set_power(&id, transitional(steps[i + 1]));
            }
        }
        shared.complete(&id, generation);
    });
    generation
}

pub(super) async fn chassis_collection(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    per_system_collection(
        &shared,
        "/redfish/v1/Chassis",
        "#ChassisCollection.ChassisCollection",
        "Chassis Collection",
    )
}

pub(super) async fn chassis(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    let Some(system) = state.system(&id) else {
        return not_found("Chassis", &id);
    };
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Chassis/{id}"),
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": id,
        "Name": format!("{} chassis", system.name),
        "ChassisType": "RackMount",
        "PowerState": system.power.as_str(),
        "Links": {
            "ComputerSystems": [link(&format!("/redfish/v1/Systems/{id}"))],
            "ManagedBy": [link(&format!("/redfish/v1/Managers/{}", state.manager_id))],
        },
    }))
}

pub(super) async fn managers(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let id = shared.lock().manager_id.clone();
    collection(
        "/redfish/v1/Managers",
        "#ManagerCollection.ManagerCollection",
        "Manager Collection",
        vec![format!("/redfish/v1/Managers/{id}")],
    )
}

pub(super) async fn manager(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    if id != state.manager_id {
        return not_found("Manager", &id);
    }
    let servers: Vec<Value> = state
        .systems
        .iter()
        .map(|s| link(&format!("/redfish/v1/Systems/{}", s.id)))
        .collect();
    let chassis: Vec<Value> = state
        .systems
        .iter()
        .map(|s| link(&format!("/redfish/v1/Chassis/{}", s.id)))
        .collect();
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Managers/{id}"),
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": id,
        "Name": "qfence lab BMC",
        "ManagerType": "BMC",
        "UUID": state.service_uuid,
        "FirmwareVersion": "1.0.0-sim",
        "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {"ManagerForServers": servers, "ManagerForChassis": chassis},
    }))
}
