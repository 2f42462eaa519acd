//! The cluster, its nodes and their guests as listed, and the HA stack's view.

use super::*;

pub(super) async fn cluster_status(State(shared): Shr, Authed(caller): Authed) -> Response {
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let online = state.nodes.iter().filter(|n| n.online()).count();
    let mut out = vec![json!({
        "type": "cluster",
        "id": "cluster",
        "name": state.cluster_name,
        "nodes": state.nodes.len(),
        "quorate": u8::from(state.quorate()),
        "version": state.nodes.len(),
        "online": online,
    })];
    for node in &state.nodes {
        out.push(json!({
            "type": "node",
            "id": format!("node/{}", node.name),
            "name": node.name,
            "nodeid": node.nodeid,
            "ip": node.ip,
            "online": u8::from(node.online()),
            "local": u8::from(node.name == state.api_node),
            "level": "",
        }));
    }
    data(Value::Array(out))
}

/// Usage counters PVE reports for a guest; plausible constants, zero when stopped.
pub(super) fn add_usage(entry: &mut Value, vm: &Vm) {
    let running = vm.status == VmStatus::Running;
    let counters = [
        ("cpu", json!(if running { 0.02 } else { 0.0 })),
        ("mem", json!(if running { vm.maxmem / 4 } else { 0 })),
        ("disk", json!(0)),
        ("maxdisk", json!(34_359_738_368_u64)),
        ("diskread", json!(0)),
        ("diskwrite", json!(0)),
        ("netin", json!(0)),
        ("netout", json!(0)),
    ];
    if let Some(obj) = entry.as_object_mut() {
        for (key, value) in counters {
            obj.insert(key.to_owned(), value);
        }
    }
}

pub(super) fn uptime(shared: &Shared, vm: &Vm) -> u64 {
    match (vm.status, vm.started_at) {
        (VmStatus::Running, Some(t)) => shared.clock.now().saturating_sub(t),
        _ => 0,
    }
}

pub(super) async fn cluster_resources(
    State(shared): Shr,
    Authed(caller): Authed,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let state = shared.lock();
    let kind = query.get("type").map(String::as_str);
    let mut out = Vec::new();
    if kind.is_none() || kind == Some("node") {
        for node in &state.nodes {
            out.push(json!({
                "id": format!("node/{}", node.name),
                "type": "node",
                "node": node.name,
                "status": if node.online() { "online" } else { "offline" },
                "level": "",
                "maxcpu": 8,
                "maxmem": 34_359_738_368_u64,
            }));
        }
    }
    if kind.is_none() || kind == Some("vm") {
        for vm in &state.vms {
            // Entries the caller may not audit are silently left out, as on PVE.
            if !allowed(&state, &caller, &format!("/vms/{}", vm.vmid), "VM.Audit") {
                continue;
            }
            let node_online = state.node(&vm.node).is_some_and(Node::online);
            let status = if node_online {
                vm.status.as_str()
            } else {
                "unknown"
            };
            let mut entry = json!({
                "id": format!("qemu/{}", vm.vmid),
                "type": "qemu",
                "vmid": vm.vmid,
                "node": vm.node,
                "name": vm.name,
                "status": status,
                "template": 0,
                "maxcpu": vm.cpus,
                "maxmem": vm.maxmem,
                "uptime": uptime(&shared, vm),
            });
            add_usage(&mut entry, vm);
            if let Some(lock) = &vm.lock {
                entry["lock"] = json!(lock);
            }
            if let Some(ha) = &vm.ha {
                entry["hastate"] = json!(ha.crm_state);
            }
            out.push(entry);
        }
    }
    data(Value::Array(out))
}

pub(super) async fn nodes(State(shared): Shr, _: Authed) -> Response {
    let state = shared.lock();
    let out: Vec<Value> = state
        .nodes
        .iter()
        .map(|n| {
            if n.online() {
                json!({"node": n.name, "id": format!("node/{}", n.name), "type": "node", "status": "online", "level": "", "maxcpu": 8, "maxmem": 34_359_738_368_u64, "uptime": 86_400})
            } else {
                json!({"node": n.name, "id": format!("node/{}", n.name), "type": "node", "status": "offline"})
            }
        })
        .collect();
    data(Value::Array(out))
}

pub(super) async fn node_status(
    State(shared): Shr,
    Authed(caller): Authed,
    Path(node): Path<String>,
) -> Response {
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    if !allowed(&state, &caller, &format!("/nodes/{node}"), "Sys.Audit") {
        return forbidden(&format!("/nodes/{node}"), "Sys.Audit");
    }
    data(json!({
        "uptime": 86_400,
        "pveversion": format!("pve-manager/{}/5a1f3e2b", state.version),
        "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2 (2025-07-22T10:04Z) x86_64",
        "cpu": 0.03,
        "memory": {"total": 34_359_738_368_u64, "used": 4_294_967_296_u64, "free": 30_064_771_072_u64},
    }))
}

pub(super) async fn node_vms(
    State(shared): Shr,
    CountedRead(caller, _): CountedRead<Listing>,
    Path(node): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    // `full=1` adds what asking each VM's QEMU gives, qmpstatus among it, as PVE's does.
    let full = query.get("full").is_some_and(|f| f == "1");
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let out: Vec<Value> = state
        .vms
        .iter()
        .filter(|v| v.node == node)
        .filter(|v| allowed(&state, &caller, &format!("/vms/{}", v.vmid), "VM.Audit"))
        .map(|v| {
            let mut entry = json!({
                "vmid": v.vmid,
                "name": v.name,
                "status": v.status.as_str(),
                "cpus": v.cpus,
                "maxmem": v.maxmem,
                "uptime": uptime(&shared, v),
            });
            if let Some(pid) = v.pid {
                entry["pid"] = json!(pid);
            }
            if let Some(lock) = &v.lock {
                entry["lock"] = json!(lock);
            }
            if full && v.status == VmStatus::Running {
                entry["qmpstatus"] = json!(v.status.as_str());
            }
            entry
        })
        .collect();
    data(Value::Array(out))
}

pub(super) fn ha_resource_body(vm: &Vm, ha: &HaService) -> Value {
    json!({
        "sid": format!("vm:{}", vm.vmid),
        "type": "vm",
        "state": ha.requested,
        "max_restart": 1,
        "max_relocate": 1,
        "failback": 1,
        "digest": format!("{:040x}", u128::from(vm.vmid)),
    })
}

pub(super) async fn ha_resources(State(shared): Shr, Authed(caller): Authed) -> Response {
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let out: Vec<Value> = state
        .vms
        .iter()
        .filter_map(|v| v.ha.as_ref().map(|ha| ha_resource_body(v, ha)))
        .collect();
    data(Value::Array(out))
}

pub(super) async fn ha_resource(
    State(shared): Shr,
    Authed(caller): Authed,
    Path(sid): Path<String>,
) -> Response {
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let vmid = sid.strip_prefix("vm:").unwrap_or(&sid);
    let found = state
        .vms
        .iter()
        .find(|v| v.vmid.to_string() == vmid)
        .and_then(|v| v.ha.as_ref().map(|ha| ha_resource_body(v, ha)));
    match found {
        Some(body) => data(body),
        None => pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("no such resource '{sid}'"),
        ),
    }
}

pub(super) async fn ha_status(State(shared): Shr, Authed(caller): Authed) -> Response {
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let quorate = state.quorate();
    let mut out = vec![json!({
        "id": "quorum",
        "type": "quorum",
        "node": state.api_node,
        "quorate": u8::from(quorate),
        "status": if quorate { "OK" } else { "No quorum on node" },
    })];
    out.push(json!({
        "id": "master",
        "type": "master",
        "node": state.api_node,
        "status": format!("{} (active, {})", state.api_node, shared.clock.now()),
    }));
    for node in &state.nodes {
        let status = if node.online() {
            "active"
        } else {
            "old timestamp - dead?"
        };
        out.push(json!({
            "id": format!("lrm:{}", node.name),
            "type": "lrm",
            "node": node.name,
            "mode": "active",
            "status": format!("{} ({status}, {})", node.name, shared.clock.now()),
        }));
    }
    for vm in &state.vms {
        if let Some(ha) = &vm.ha {
            out.push(json!({
                "id": format!("service:vm:{}", vm.vmid),
                "type": "service",
                "sid": format!("vm:{}", vm.vmid),
                "node": vm.node,
                "state": ha.crm_state,
                "crm_state": ha.crm_state,
                "request_state": ha.requested,
                "status": format!("vm:{} ({}, {})", vm.vmid, vm.node, ha.crm_state),
            }));
        }
    }
    data(Value::Array(out))
}
