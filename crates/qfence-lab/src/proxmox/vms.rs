//! One VM: its status, its configuration and the power actions that start tasks.

use super::*;

/// The VM `vmid` on `node`, as PVE finds it: by its configuration file on that node.
pub(super) fn vm_on<'a>(state: &'a PveState, node: &str, vmid: &str) -> Result<&'a Vm, Response> {
    let missing = || {
        pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
        )
    };
    let id: u32 = vmid
        .parse()
        .map_err(|_| pve_error(StatusCode::BAD_REQUEST, "Parameter verification failed."))?;
    state
        .vms
        .iter()
        .find(|v| v.vmid == id && v.node == node)
        .ok_or_else(missing)
}

/// The VM a read names, checked in PVE's order: the node answers, the caller may audit the
/// VM's path (before whether it exists is told), the VM is on that node.
fn audited_vm<'a>(
    state: &'a PveState,
    caller: &Principal,
    node: &str,
    vmid: &str,
) -> Result<&'a Vm, Response> {
    reach_node(state, node)?;
    let path = format!("/vms/{vmid}");
    if !allowed(state, caller, &path, "VM.Audit") {
        return Err(forbidden(&path, "VM.Audit"));
    }
    vm_on(state, node, vmid)
}

pub(super) async fn vm_current(
    State(shared): Shr,
    CountedRead(caller, _): CountedRead<StatusCurrent>,
    Path((node, vmid)): Path<(String, String)>,
) -> Response {
    let state = shared.lock();
    let vm = match audited_vm(&state, &caller, &node, &vmid) {
        Ok(vm) => vm,
        Err(r) => return r,
    };
    let mut out = json!({
        "vmid": vm.vmid,
        "name": vm.name,
        "status": vm.status.as_str(),
        "qmpstatus": vm.status.as_str(),
        "cpus": vm.cpus,
        "maxmem": vm.maxmem,
        "uptime": uptime(&shared, vm),
        "ha": match &vm.ha {
            Some(ha) => json!({"managed": 1, "state": ha.crm_state}),
            None => json!({"managed": 0}),
        },
        "agent": 0,
    });
    add_usage(&mut out, vm);
    if let Some(pid) = vm.pid {
        out["pid"] = json!(pid);
    }
    if let Some(lock) = &vm.lock {
        out["lock"] = json!(lock);
    }
    data(out)
}

pub(super) async fn vm_config(
    State(shared): Shr,
    Authed(caller): Authed,
    Path((node, vmid)): Path<(String, String)>,
) -> Response {
    let state = shared.lock();
    let vm = match audited_vm(&state, &caller, &node, &vmid) {
        Ok(vm) => vm,
        Err(r) => return r,
    };
    let text = format!("{}:{}:{}", vm.vmid, vm.name, vm.node);
    let digest = crate::tls::sha256_fingerprint(text.as_bytes());
    let mut out = json!({
        "name": vm.name,
        "cores": vm.cpus,
        "sockets": 1,
        // PVE sends memory as a property string.
        "memory": (vm.maxmem >> 20).to_string(),
        "smbios1": format!("uuid={:08x}-0000-4000-8000-{:012x}", vm.vmid, vm.vmid),
        "digest": digest.get(..40).unwrap_or(&digest),
    });
    if let Some(lock) = &vm.lock {
        out["lock"] = json!(lock);
    }
    data(out)
}

/// What a power task does when it finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    Start,
    Stop,
    Restart,
    Nothing,
}

pub(super) async fn vm_action(
    State(shared): Shr,
    Authed(caller): Authed,
    headers: HeaderMap,
    uri: Uri,
    Path((node, vmid, action)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let params = parameters(&uri, &headers, &body);
    let (vm, task_duration) = {
        let state = shared.lock();
        if let Err(r) = reach_node(&state, &node) {
            return r;
        }
        let path = format!("/vms/{vmid}");
        if !allowed(&state, &caller, &path, "VM.PowerMgmt") {
            return forbidden(&path, "VM.PowerMgmt");
        }
        // pmxcfs is read-only without quorum: the VM's config cannot be locked.
        if !state.quorate() {
            return pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cluster not ready - no quorum?",
            );
        }
        match vm_on(&state, &node, &vmid) {
            Ok(vm) => (vm.clone(), state.task_duration),
            Err(r) => return r,
        }
    };
    let kind = match action.as_str() {
        "start" => "qmstart",
        "stop" => "qmstop",
        "shutdown" => "qmshutdown",
        "reset" => "qmreset",
        "reboot" => "qmreboot",
        _ => {
            return pve_error(
                StatusCode::NOT_IMPLEMENTED,
                &format!("Method 'POST /nodes/{node}/qemu/{vmid}/status/{action}' not implemented"),
            );
        }
    };
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && caller.id() != "root@pam" {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "data": null,
                "errors": {"skiplock": "Only root may use this option."},
                "message": "Parameter verification failed.\n",
            })),
        )
            .into_response();
    }
    let running = vm.status == VmStatus::Running;
    if vm.ha.is_some() && matches!(action.as_str(), "start" | "stop" | "shutdown") {
        return ha_request(&shared, &node, &vmid, vm.vmid, action == "start", &caller);
    }
    // Checked before the worker starts, as PVE does.
    if matches!(action.as_str(), "shutdown" | "reset" | "reboot") && !running {
        return pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("VM {vmid} not running"),
        );
    }
    // Checked inside the worker: the task fails.
    let failure = match (&vm.lock, skiplock) {
        (Some(lock), false) => Some(format!("VM is locked ({lock})")),
        _ if action == "start" && running => Some(format!("VM {vmid} already running")),
        _ => None,
    };
    let effect = match action.as_str() {
        _ if failure.is_some() => Effect::Nothing,
        "start" => Effect::Start,
        "stop" | "shutdown" if running => Effect::Stop,
        "reset" | "reboot" => Effect::Restart,
        _ => Effect::Nothing,
    };
    let task = new_task(&shared, &node, kind, &vmid, &caller);
    let upid = task.upid.clone();
    shared.lock().tasks.push(task);
    tracing::debug!(%upid, ?effect, "Simulated PVE task started");
    if task_duration.is_zero() {
        finish_task(&shared, &upid, vm.vmid, effect, failure);
    } else {
        let shared = shared.clone();
        let done = upid.clone();
        tokio::spawn(async move {
            tokio::time::sleep(task_duration).await;
            finish_task(&shared, &done, vm.vmid, effect, failure);
        });
    }
    data(json!(upid))
}

/// An HA-managed guest: the request is queued for the HA stack in an `hastart`/`hastop`
/// task that ends OK at once; the VM changes `ha_delay` later. `OK` only means "queued".
pub(super) fn ha_request(
    shared: &Arc<Shared>,
    node: &str,
    vmid: &str,
    id: u32,
    start: bool,
    caller: &Principal,
) -> Response {
    let kind = if start { "hastart" } else { "hastop" };
    let task = new_task(shared, node, kind, vmid, caller);
    let upid = task.upid.clone();
    let delay = {
        let mut state = shared.lock();
        state.tasks.push(task);
        if let Some(ha) = state
            .vms
            .iter_mut()
            .find(|v| v.vmid == id)
            .and_then(|v| v.ha.as_mut())
        {
            ha.requested = if start { "started" } else { "stopped" }.to_owned();
            if !start && ha.crm_state == "started" {
                ha.crm_state = "request_stop".to_owned();
            }
        }
        state.ha_delay
    };
    finish_task(shared, &upid, id, Effect::Nothing, None);
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let mut state = shared.lock();
        let Some(vm) = state.vms.iter().find(|v| v.vmid == id).cloned() else {
            return;
        };
        if !state.node(&vm.node).is_some_and(Node::online) {
            return;
        }
        let pid = if start {
            Some(shared.next_pid() + 10_000)
        } else {
            None
        };
        let now = shared.clock.now();
        if let Some(vm) = state.vms.iter_mut().find(|v| v.vmid == id) {
            let wanted = vm.ha.as_ref().map(|h| h.requested == "started");
            if wanted != Some(start) {
                return; // a newer request changed its mind
            }
            if start && vm.status != VmStatus::Running {
                vm.status = VmStatus::Running;
                vm.pid = pid;
                vm.started_at = Some(now);
            } else if !start {
                vm.status = VmStatus::Stopped;
                vm.pid = None;
                vm.started_at = None;
            }
            if let Some(ha) = vm.ha.as_mut() {
                ha.crm_state = if start { "started" } else { "stopped" }.to_owned();
            }
        }
    });
    data(json!(upid))
}

pub(super) fn new_task(
    shared: &Shared,
    node: &str,
    kind: &str,
    id: &str,
    caller: &Principal,
) -> Task {
    let pid = shared.next_pid();
    let pstart = pid.wrapping_mul(7) + 4000;
    let starttime = shared.clock.now();
    let user = caller.id();
    Task {
        upid: format!("UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{id}:{user}:"),
        node: node.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        user,
        pid,
        pstart,
        starttime,
        endtime: None,
        exitstatus: None,
        log: Vec::new(),
    }
}

pub(super) fn finish_task(
    shared: &Shared,
    upid: &str,
    vmid: u32,
    effect: Effect,
    failure: Option<String>,
) {
    let now = shared.clock.now();
    let mut state = shared.lock();
    let node = state
        .tasks
        .iter()
        .find(|t| t.upid == upid)
        .map(|t| t.node.clone())
        .unwrap_or_default();
    // A worker on a node that lost power never reports back properly.
    let node_alive = state.node(&node).is_some_and(|n| n.powered);
    let outcome = if !node_alive {
        Err("unexpected status".to_owned())
    } else if let Some(message) = failure {
        Err(message)
    } else {
        Ok(())
    };
    if outcome.is_ok() {
        let next_pid = if effect == Effect::Nothing {
            None
        } else {
            Some(shared.next_pid() + 10_000)
        };
        if let Some(vm) = state.vms.iter_mut().find(|v| v.vmid == vmid) {
            match effect {
                Effect::Start | Effect::Restart => {
                    vm.status = VmStatus::Running;
                    vm.pid = next_pid;
                    vm.started_at = Some(now);
                }
                Effect::Stop => {
                    vm.status = VmStatus::Stopped;
                    vm.pid = None;
                    vm.started_at = None;
                }
                Effect::Nothing => {}
            }
        }
    }
    if let Some(task) = state.tasks.iter_mut().find(|t| t.upid == upid) {
        task.endtime = Some(now);
        match outcome {
            Ok(()) => {
                task.exitstatus = Some("OK".to_owned());
                task.log.push("TASK OK".to_owned());
            }
            Err(message) => {
                task.log.push(format!("TASK ERROR: {message}"));
                task.exitstatus = Some(message);
            }
        }
    }
}
