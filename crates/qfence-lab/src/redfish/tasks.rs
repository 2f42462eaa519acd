//! The task service: power changes that take time, and their monitors.

use super::*;

pub(super) fn task_body(shared: &Shared, task_id: &str) -> Option<Value> {
    let (system, generation) = shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(task_id)
        .cloned()?;
    let state = shared.task_state(&system, generation);
    let (status, percent) = match state {
        "Completed" => ("OK", 100),
        "Cancelled" => ("Warning", 100),
        _ => ("OK", 50),
    };
    Some(json!({
        "@odata.id": format!("/redfish/v1/TaskService/Tasks/{task_id}"),
        "@odata.type": "#Task.v1_7_4.Task",
        "Id": task_id,
        "Name": format!("Reset {system}"),
        "TaskState": state,
        "TaskStatus": status,
        "PercentComplete": percent,
        "TaskMonitor": format!("/redfish/v1/TaskService/TaskMonitors/{task_id}"),
        "Messages": [],
    }))
}

pub(super) async fn task_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    json_ok(json!({
        "@odata.id": "/redfish/v1/TaskService",
        "@odata.type": "#TaskService.v1_2_1.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": true,
        "Tasks": link("/redfish/v1/TaskService/Tasks"),
    }))
}

pub(super) async fn task_collection(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .map(|id| format!("/redfish/v1/TaskService/Tasks/{id}"))
        .collect();
    collection(
        "/redfish/v1/TaskService/Tasks",
        "#TaskCollection.TaskCollection",
        "Task Collection",
        members,
    )
}

pub(super) async fn task(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    match task_body(&shared, &id) {
        Some(body) => json_ok(body),
        None => not_found("Task", &id),
    }
}

/// A task monitor: 202 (with the task) while running, then the final answer of the
/// operation itself: 204 for a completed reset.
pub(super) async fn task_monitor(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    let Some(body) = task_body(&shared, &id) else {
        return not_found("TaskMonitor", &id);
    };
    match body["TaskState"].as_str() {
        Some("Running") => {
            let mut response = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        Some("Completed") => StatusCode::NO_CONTENT.into_response(),
        _ => json_ok(body),
    }
}
