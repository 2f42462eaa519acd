//! Tasks: the UPIDs power actions return, their status and their log.

use super::*;

pub(super) fn task_body(task: &Task) -> Value {
    let mut out = json!({
        "upid": task.upid,
        "node": task.node,
        "pid": task.pid,
        "pstart": task.pstart,
        "starttime": task.starttime,
        "type": task.kind,
        "id": task.id,
        "user": task.user,
        "status": if task.exitstatus.is_some() { "stopped" } else { "running" },
    });
    if let Some((_, token)) = task.user.split_once('!') {
        out["tokenid"] = json!(token);
    }
    if let Some(exit) = &task.exitstatus {
        out["exitstatus"] = json!(exit);
    }
    out
}

/// The task, if the caller may see it: its owner, or `Sys.Audit` on the node.
pub(super) fn visible_task<'a>(
    state: &'a PveState,
    caller: &Principal,
    node: &str,
    upid: &str,
) -> Result<&'a Task, Response> {
    let task = state
        .tasks
        .iter()
        .find(|t| t.upid == upid && t.node == node)
        .ok_or_else(|| {
            pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unable to parse worker upid '{upid}'"),
            )
        })?;
    let owner = task.user == caller.id() || task.user == caller.userid();
    if !owner && !allowed(state, caller, &format!("/nodes/{node}"), "Sys.Audit") {
        return Err(forbidden(&format!("/nodes/{node}"), "Sys.Audit"));
    }
    Ok(task)
}

pub(super) async fn tasks(
    State(shared): Shr,
    Authed(caller): Authed,
    Path(node): Path<String>,
) -> Response {
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let audit = allowed(&state, &caller, &format!("/nodes/{node}"), "Sys.Audit");
    let out: Vec<Value> = state
        .tasks
        .iter()
        .rev()
        .filter(|t| t.node == node && (audit || t.user == caller.id()))
        .map(|t| {
            let mut entry = task_body(t);
            if let Some(obj) = entry.as_object_mut() {
                // The list has `status` = the exit status once ended, and `endtime`.
                obj.remove("exitstatus");
                match (&t.exitstatus, t.endtime) {
                    (Some(exit), Some(end)) => {
                        obj.insert("status".into(), json!(exit));
                        obj.insert("endtime".into(), json!(end));
                    }
                    _ => {
                        obj.remove("status");
                    }
                }
            }
            entry
        })
        .collect();
    data(Value::Array(out))
}

pub(super) async fn task_status(
    State(shared): Shr,
    Authed(caller): Authed,
    Path((node, upid)): Path<(String, String)>,
) -> Response {
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    match visible_task(&state, &caller, &node, &upid) {
        Ok(task) => data(task_body(task)),
        Err(r) => r,
    }
}

pub(super) async fn task_log(
    State(shared): Shr,
    Authed(caller): Authed,
    Path((node, upid)): Path<(String, String)>,
) -> Response {
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    match visible_task(&state, &caller, &node, &upid) {
        Ok(task) => data(Value::Array(
            task.log
                .iter()
                .enumerate()
                .map(|(i, line)| json!({"n": i + 1, "t": line}))
                .collect(),
        )),
        Err(r) => r,
    }
}
