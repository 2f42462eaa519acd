//! Nova's compute API (v2.1), following the public API reference for the calls a client of
//! Instance HA makes: the version document, `os-services` (list; `PUT /os-services/{id}` from
//! 2.53), servers (list with `host`/`all_tenants`/paging, show, boot, delete, and the
//! `evacuate`, `lock`, `unlock`, `pause`, `unpause` actions), `os-migrations`, flavors,
//! aggregates, and Glance's `GET /v2/images/{id}`.
//!
//! Microversions: `OpenStack-API-Version: compute X.Y` (or the older
//! `X-OpenStack-Nova-API-Version`), `latest` for the maximum, none for 2.1; outside the
//! range is 406; every answer says the version it used. Fields appear from the microversion
//! that added them (service UUIDs 2.53, `forced_down` 2.11, `locked` 2.9, `locked_reason`
//! 2.73, embedded flavors 2.47, migration `uuid` 2.59 and `migration_type` 2.23). Policy: the
//! default one, roughly: admin for services, hosts, evacuate and migrations; a project member
//! for its own servers (lock, unlock, pause, boot, delete). Errors in Nova's shape
//! `{"<name>": {"code", "message"}}`.

// Helpers return the ready HTTP answer as their error: it is built once, on a cold path.
#![allow(clippy::result_large_err)]
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::keystone::{authenticate, nova_time};
use super::state::{Migration, MigrationStatus, NovaState, Server, VmState, uuid_from};
use super::{Shared, TokenInfo};

type Shr = State<Arc<Shared>>;
type Q = Query<BTreeMap<String, String>>;

/// Nova's error body key for each status.
fn fault_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        405 => "badMethod",
        409 => "conflictingRequest",
        413 | 429 => "overLimit",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

pub(super) fn fault(status: StatusCode, message: &str) -> Response {
    let body = json!({fault_name(status): {"code": status.as_u16(), "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The request's microversion, checked against the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Mv(u16, u16);

impl Mv {
    fn at_least(self, major: u16, minor: u16) -> bool {
        self >= Mv(major, minor)
    }
}

fn microversion(state: &NovaState, headers: &HeaderMap) -> Result<Mv, Response> {
    let (min, max) = (
        Mv(state.min_microversion.0, state.min_microversion.1),
        Mv(state.max_microversion.0, state.max_microversion.1),
    );
    let asked = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("compute "))
        .or_else(|| {
            headers
                .get("x-openstack-nova-api-version")
                .and_then(|v| v.to_str().ok())
        })
        .map(str::trim);
    let v = match asked {
        None => min,
        Some("latest") => max,
        Some(s) => {
            let parsed = s
                .split_once('.')
                .and_then(|(a, b)| Some(Mv(a.parse().ok()?, b.parse().ok()?)));
            match parsed {
                Some(v) => v,
                None => {
                    return Err(fault(
                        StatusCode::BAD_REQUEST,
                        &format!(
                            "API Version String {s} is of invalid format. Must be of format MajorNum.MinorNum."
                        ),
                    ));
                }
            }
        }
    };
    if v < min || v > max {
        return Err(fault(
            StatusCode::NOT_ACCEPTABLE,
            &format!(
                "Version {}.{} is not supported by the API. Minimum is {}.{} and maximum is {}.{}.",
                v.0, v.1, min.0, min.1, max.0, max.1
            ),
        ));
    }
    Ok(v)
}

/// Authentication, the microversion, and the answer's version headers.
struct Call {
    who: TokenInfo,
    mv: Mv,
}

impl Call {
    fn admin(&self) -> bool {
        self.who.roles.iter().any(|r| r == "admin")
    }

    fn need_admin(&self, rule: &str) -> Result<(), Response> {
        if self.admin() {
            Ok(())
        } else {
            Err(fault(
                StatusCode::FORBIDDEN,
                &format!("Policy doesn't allow {rule} to be performed."),
            ))
        }
    }

    fn answer(&self, status: StatusCode, body: Option<Value>) -> Response {
        let mut r = match body {
            Some(b) => (status, axum::Json(b)).into_response(),
            None => status.into_response(),
        };
        let v = format!("{}.{}", self.mv.0, self.mv.1);
        let h = r.headers_mut();
        if let Ok(x) = HeaderValue::from_str(&format!("compute {v}")) {
            h.insert("openstack-api-version", x);
        }
        if let Ok(x) = HeaderValue::from_str(&v) {
            h.insert("x-openstack-nova-api-version", x);
        }
        h.insert(
            "vary",
            HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
        );
        r
    }
}

fn begin(s: &Shared, headers: &HeaderMap) -> Result<Call, Response> {
    let who = authenticate(s, headers)?;
    let mv = microversion(&s.lock(), headers)?;
    Ok(Call { who, mv })
}

macro_rules! begin {
    ($s:expr, $h:expr) => {
        match begin(&$s, &$h) {
            Ok(c) => c,
            Err(r) => return r,
        }
    };
}

macro_rules! check {
    ($e:expr) => {
        if let Err(r) = $e {
            return r;
        }
    };
}

macro_rules! c_admin_or {
    ($c:expr, $rule:expr) => {
        if let Err(r) = $c.need_admin($rule) {
            return r;
        }
    };
}

pub(super) async fn versions(State(s): Shr) -> Response {
    let (doc, base) = (version_doc(&s.lock()), s.base());
    let mut v = doc;
    v["links"] = json!([{"rel": "self", "href": format!("{base}/compute/v2.1/")}]);
    axum::Json(json!({"versions": [v]})).into_response()
}

pub(super) async fn version(State(s): Shr) -> Response {
    let base = s.base();
    let mut v = version_doc(&s.lock());
    v["links"] = json!([{"rel": "self", "href": format!("{base}/compute/v2.1/")}]);
    axum::Json(json!({"version": v})).into_response()
}

fn version_doc(state: &NovaState) -> Value {
    json!({
        "id": "v2.1", "status": "CURRENT",
        "version": format!("{}.{}", state.max_microversion.0, state.max_microversion.1),
        "min_version": format!("{}.{}", state.min_microversion.0, state.min_microversion.1),
        "updated": "2013-07-23T11:33:21Z",
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.compute+json;version=2.1"}],
    })
}

fn service_json(state: &NovaState, h: &super::state::Host, mv: Mv, now: SystemTime) -> Value {
    let up = state.host_up(h, now);
    let updated = if h.alive { now } else { h.last_heartbeat };
    let mut v = json!({
        "id": if mv.at_least(2, 53) { json!(h.service_id) } else { json!(h.legacy_id) },
        "binary": "nova-compute", "host": h.name, "zone": h.zone,
        "status": if h.disabled { "disabled" } else { "enabled" },
        "state": if up { "up" } else { "down" },
        "updated_at": nova_time(updated),
        "disabled_reason": h.disabled_reason,
    });
    if mv.at_least(2, 11) {
        v["forced_down"] = json!(h.forced_down);
    }
    v
}

/// Where the one `nova-scheduler` runs.
const SCHEDULER_HOST: &str = "controller-0";

/// The `nova-scheduler` service: up while `scheduler_up`, its heartbeat now.
fn scheduler_json(state: &NovaState, mv: Mv, now: SystemTime) -> Value {
    let mut v = json!({
        "id": if mv.at_least(2, 53) { json!(super::state::uuid_from(0x5c_0000)) } else { json!(0) },
        "binary": "nova-scheduler", "host": SCHEDULER_HOST, "zone": "internal",
        "status": "enabled",
        "state": if state.scheduler_up { "up" } else { "down" },
        "updated_at": nova_time(now),
        "disabled_reason": null,
    });
    if mv.at_least(2, 11) {
        v["forced_down"] = json!(false);
    }
    v
}

pub(super) async fn services(State(s): Shr, headers: HeaderMap, Query(q): Q) -> Response {
    let c = begin!(s, headers);
    check!(c.need_admin("os_compute_api:os-services:list"));
    let state = s.lock();
    let now = SystemTime::now();
    let mut list: Vec<Value> = state
        .hosts
        .iter()
        .filter(|h| q.get("host").is_none_or(|x| x == &h.name))
        .filter(|_| q.get("binary").is_none_or(|b| b == "nova-compute"))
        .map(|h| service_json(&state, h, c.mv, now))
        .collect();
    if q.get("host").is_none_or(|x| x == SCHEDULER_HOST)
        && q.get("binary").is_none_or(|b| b == "nova-scheduler")
    {
        list.push(scheduler_json(&state, c.mv, now));
    }
    c.answer(StatusCode::OK, Some(json!({"services": list})))
}

pub(super) async fn update_service(
    State(s): Shr,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let c = begin!(s, headers);
    check!(c.need_admin("os_compute_api:os-services:update"));
    if !c.mv.at_least(2, 53) {
        return fault(StatusCode::NOT_FOUND, "The resource could not be found.");
    }
    let Ok(b) = serde_json::from_slice::<Value>(&body) else {
        return fault(StatusCode::BAD_REQUEST, "Malformed request body");
    };
    let mut state = s.lock();
    let Some(i) = state.hosts.iter().position(|h| h.service_id == id) else {
        return fault(
            StatusCode::NOT_FOUND,
            &format!("Service {id} could not be found."),
        );
    };
    let name = state.hosts[i].name.clone();
    if b.get("disabled_reason").is_some() && b.get("status") != Some(&json!("disabled")) {
        return fault(
            StatusCode::BAD_REQUEST,
            "Specifying 'disabled_reason' with status 'enabled' is invalid.",
        );
    }
    if b.get("forced_down") == Some(&json!(false)) && state.hosts[i].forced_down {
        let done = state
            .migrations
            .iter()
            .any(|m| m.source == name && m.status == MigrationStatus::Done);
        if done {
            return fault(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Unable to force up host {name} as 'done' evacuation migration records \
                     remain associated with the host. Ensure the compute service has been \
                     restarted, allowing these records to move to 'completed' before retrying \
                     this request."
                ),
            );
        }
    }
    let h = &mut state.hosts[i];
    match b.get("status").and_then(Value::as_str) {
        Some("disabled") => {
            h.disabled = true;
            h.disabled_reason = b
                .get("disabled_reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        Some("enabled") => {
            h.disabled = false;
            h.disabled_reason = None;
        }
        Some(other) => {
            return fault(
                StatusCode::BAD_REQUEST,
                &format!("Invalid input for field/attribute status. Value: {other}."),
            );
        }
        None => {}
    }
    if let Some(f) = b.get("forced_down").and_then(Value::as_bool) {
        h.forced_down = f;
    }
    let v = service_json(&state, &state.hosts[i], c.mv, SystemTime::now());
    c.answer(StatusCode::OK, Some(json!({"service": v})))
}

fn server_json(state: &NovaState, s: &Server, c: &Call, base: &str) -> Value {
    let status = if s.task_state.as_deref() == Some("rebuilding") {
        "REBUILD"
    } else {
        match s.vm_state {
            VmState::Active => "ACTIVE",
            VmState::Stopped => "SHUTOFF",
            VmState::Paused => "PAUSED",
            VmState::Error => "ERROR",
        }
    };
    let flavor = state.flavors.iter().find(|f| f.id == s.flavor);
    let mut v = json!({
        "id": s.id, "name": s.name, "status": status, "tenant_id": s.project_id,
        "user_id": "u-admin", "metadata": s.metadata,
        "image": {"id": s.image, "links": [{"rel": "bookmark",
            "href": format!("{base}/compute/images/{}", s.image)}]},
        "OS-EXT-STS:vm_state": s.vm_state.as_str(),
        "OS-EXT-STS:task_state": s.task_state,
        "OS-EXT-STS:power_state": if s.vm_state == VmState::Active { 1 } else { 4 },
        "links": [{"rel": "self", "href": format!("{base}/compute/v2.1/servers/{}", s.id)}],
    });
    v["flavor"] = if c.mv.at_least(2, 47) {
        match flavor {
            Some(f) => json!({"original_name": f.name, "vcpus": f.vcpus, "ram": f.ram_mb,
                "disk": f.disk_gb, "ephemeral": 0, "swap": 0, "extra_specs": f.extra_specs}),
            None => json!({}),
        }
    } else {
        json!({"id": s.flavor, "links": []})
    };
    if c.admin() {
        v["OS-EXT-SRV-ATTR:host"] = json!(s.host);
        v["OS-EXT-SRV-ATTR:hypervisor_hostname"] = json!(s.host);
    }
    if c.mv.at_least(2, 9) {
        v["locked"] = json!(s.locked);
    }
    if c.mv.at_least(2, 73) {
        v["locked_reason"] = json!(s.locked_reason);
    }
    if let Some(f) = &s.fault {
        v["fault"] = json!({"code": 500, "message": f, "created": nova_time(SystemTime::now())});
    }
    v
}

fn visible(c: &Call, s: &Server, all_tenants: bool) -> bool {
    if c.admin() && all_tenants {
        true
    } else {
        s.project_id == c.who.project_id
    }
}

pub(super) async fn servers_detail(State(s): Shr, headers: HeaderMap, Query(q): Q) -> Response {
    let c = begin!(s, headers);
    list_servers(&s, &c, &q, true)
}

pub(super) async fn servers_brief(State(s): Shr, headers: HeaderMap, Query(q): Q) -> Response {
    let c = begin!(s, headers);
    list_servers(&s, &c, &q, false)
}

fn list_servers(s: &Shared, c: &Call, q: &BTreeMap<String, String>, detail: bool) -> Response {
    let all = q
        .get("all_tenants")
        .is_some_and(|v| !matches!(v.as_str(), "0" | "false" | "False"));
    let base = s.base();
    let state = s.lock();
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(1000);
    let mut rows: Vec<&Server> = state
        .servers
        .iter()
        .filter(|x| visible(c, x, all))
        .filter(|x| !c.admin() || q.get("host").is_none_or(|h| h == &x.host))
        .collect();
    if let Some(m) = q.get("marker") {
        match rows.iter().position(|x| &x.id == m) {
            Some(i) => rows.drain(..=i).for_each(drop),
            None => return fault(StatusCode::BAD_REQUEST, &format!("marker [{m}] not found")),
        }
    }
    rows.truncate(limit);
    // `check!` is for handlers that may refuse after `begin!`; listing never does.
    let list: Vec<Value> = rows
        .iter()
        .map(|x| {
            if detail {
                server_json(&state, x, c, &base)
            } else {
                json!({"id": x.id, "name": x.name, "links": []})
            }
        })
        .collect();
    c.answer(StatusCode::OK, Some(json!({"servers": list})))
}

pub(super) async fn server_show(
    State(s): Shr,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let c = begin!(s, headers);
    let base = s.base();
    let state = s.lock();
    match state.server(&id).filter(|x| visible(&c, x, true)) {
        Some(x) => c.answer(
            StatusCode::OK,
            Some(json!({"server": server_json(&state, x, &c, &base)})),
        ),
        None => fault(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        ),
    }
}

pub(super) async fn server_delete(
    State(s): Shr,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let c = begin!(s, headers);
    let mut state = s.lock();
    let Some(i) = state
        .servers
        .iter()
        .position(|x| x.id == id && visible(&c, x, true))
    else {
        return fault(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        );
    };
    if state.servers[i].locked && !c.admin() {
        return fault(StatusCode::CONFLICT, &format!("Instance {id} is locked"));
    }
    state.servers.remove(i);
    c.answer(StatusCode::NO_CONTENT, None)
}

/// `POST /servers`: `name`, `imageRef`, `flavorRef`, `networks: "none"`, `host` (2.74,
/// admin), `min_count`/`max_count`. Servers are ACTIVE at once (there is no hypervisor).
pub(super) async fn server_create(State(s): Shr, headers: HeaderMap, body: Bytes) -> Response {
    let c = begin!(s, headers);
    let Ok(b) = serde_json::from_slice::<Value>(&body) else {
        return fault(StatusCode::BAD_REQUEST, "Malformed request body");
    };
    let sv = &b["server"];
    let name = sv["name"].as_str().unwrap_or("server").to_owned();
    let n = sv["max_count"].as_u64().unwrap_or(1).max(1) as usize;
    let base = s.base();
    let mut state = s.lock();
    let flavor = sv["flavorRef"].as_str().unwrap_or("1").to_owned();
    if !state.flavors.iter().any(|f| f.id == flavor) {
        return fault(
            StatusCode::BAD_REQUEST,
            &format!("Flavor {flavor} could not be found."),
        );
    }
    let host = match sv["host"].as_str() {
        Some(h) if !c.mv.at_least(2, 74) => {
            return fault(
                StatusCode::BAD_REQUEST,
                &format!("Additional properties are not allowed ('host' was unexpected): {h}"),
            );
        }
        Some(h) => {
            c_admin_or!(c, "compute:servers:create:requested_destination");
            if state.host(h).is_none() {
                return fault(
                    StatusCode::BAD_REQUEST,
                    &format!("Compute host {h} could not be found."),
                );
            }
            Some(h.to_owned())
        }
        None => None,
    };
    let mut made = Vec::new();
    for i in 0..n {
        let Some(target) = host.clone().or_else(|| pick_host(&state, None)) else {
            return fault(StatusCode::BAD_REQUEST, "No valid host was found.");
        };
        let id = uuid_from(0x9_0000_0000 + s.next_id());
        state.servers.push(Server {
            id: id.clone(),
            name: if n > 1 {
                format!("{name}-{}", i + 1)
            } else {
                name.clone()
            },
            project_id: c.who.project_id.clone(),
            host: target,
            vm_state: VmState::Active,
            task_state: None,
            flavor: flavor.clone(),
            image: sv["imageRef"].as_str().unwrap_or("").to_owned(),
            locked: false,
            locked_reason: None,
            fault: None,
            metadata: BTreeMap::new(),
        });
        made.push(id);
    }
    let id = &made[0];
    c.answer(
        StatusCode::ACCEPTED,
        Some(json!({"server": {"id": id, "links": [{"rel": "self",
            "href": format!("{base}/compute/v2.1/servers/{id}")}], "OS-DCF:diskConfig": "MANUAL",
            "security_groups": [{"name": "default"}]}})),
    )
}

/// The least loaded host that is up, enabled and not `except`; `None` when there is none.
fn pick_host(state: &NovaState, except: Option<&str>) -> Option<String> {
    let now = SystemTime::now();
    state
        .hosts
        .iter()
        .filter(|h| Some(h.name.as_str()) != except && !h.disabled && state.host_up(h, now))
        .min_by_key(|h| state.servers.iter().filter(|s| s.host == h.name).count())
        .map(|h| h.name.clone())
}

pub(super) async fn server_action(
    State(s): Shr,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let c = begin!(s, headers);
    let Ok(b) = serde_json::from_slice::<Value>(&body) else {
        return fault(StatusCode::BAD_REQUEST, "Malformed request body");
    };
    let Some((action, args)) = b.as_object().and_then(|o| o.iter().next()) else {
        return fault(StatusCode::BAD_REQUEST, "There is no such action");
    };
    let (action, args) = (action.clone(), args.clone());
    if action == "evacuate" {
        return evacuate(&s, &c, &id, &args);
    }
    let mut state = s.lock();
    let Some(srv) = state
        .server_mut(&id)
        .filter(|x| c.admin() || x.project_id == c.who.project_id)
    else {
        return fault(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        );
    };
    match action.as_str() {
        "lock" => {
            // Below 2.73 Nova accepts a reason and ignores it (seen on Nova 34).
            let reason = args
                .get("locked_reason")
                .and_then(Value::as_str)
                .filter(|_| c.mv.at_least(2, 73));
            // Locking a locked server again without a reason keeps the reason it has.
            if !srv.locked || reason.is_some() {
                srv.locked_reason = reason.map(str::to_owned);
            }
            srv.locked = true;
        }
        "unlock" => {
            srv.locked = false;
            srv.locked_reason = None;
        }
        "pause" | "unpause" => {
            let (from, to) = if action == "pause" {
                (VmState::Active, VmState::Paused)
            } else {
                (VmState::Paused, VmState::Active)
            };
            if srv.vm_state != from {
                return fault(
                    StatusCode::CONFLICT,
                    &format!(
                        "Cannot '{action}' instance {id} while it is in vm_state {}",
                        srv.vm_state.as_str()
                    ),
                );
            }
            srv.vm_state = to;
        }
        other => {
            return fault(
                StatusCode::BAD_REQUEST,
                &format!("There is no such action: {other}"),
            );
        }
    }
    c.answer(StatusCode::ACCEPTED, None)
}

/// The evacuate action: checks as Nova's API does (admin; the server's state; its host down;
/// a named target known), records the migration `accepted`, answers 200, and finishes in the
/// background after `evacuation.duration`.
fn evacuate(s: &Arc<Shared>, c: &Call, id: &str, args: &Value) -> Response {
    c_admin_or!(c, "os_compute_api:os-evacuate");
    let mut state = s.lock();
    if !c.mv.at_least(2, 14) && args.get("onSharedStorage").is_none() {
        return fault(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute evacuate. 'onSharedStorage' is a required property",
        );
    }
    if c.mv.at_least(2, 14) && args.get("onSharedStorage").is_some() {
        return fault(
            StatusCode::BAD_REQUEST,
            "Invalid input for field/attribute evacuate. Additional properties are not allowed ('onSharedStorage' was unexpected)",
        );
    }
    let Some(srv) = state.server(id).cloned() else {
        return fault(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        );
    };
    if !matches!(
        srv.vm_state,
        VmState::Active | VmState::Stopped | VmState::Error
    ) || srv.task_state.is_some()
    {
        return fault(
            StatusCode::CONFLICT,
            &format!(
                "Cannot 'evacuate' instance {id} while it is in {}",
                match &srv.task_state {
                    Some(t) => format!("task_state {t}"),
                    None => format!("vm_state {}", srv.vm_state.as_str()),
                }
            ),
        );
    }
    let target = args.get("host").and_then(Value::as_str).map(str::to_owned);
    if let Some(t) = &target
        && state.host(t).is_none()
    {
        return fault(
            StatusCode::NOT_FOUND,
            &format!("Compute host {t} could not be found."),
        );
    }
    let now = SystemTime::now();
    let source_up = state.host(&srv.host).is_some_and(|h| state.host_up(h, now));
    if source_up {
        return fault(
            StatusCode::BAD_REQUEST,
            &format!("Compute service of {} is still in use.", srv.host),
        );
    }
    let mid = state.migrations.iter().map(|m| m.id).max().unwrap_or(0) + 1;
    state.migrations.push(Migration {
        id: mid,
        uuid: uuid_from(0x3_0000_0000 + mid),
        server: id.to_owned(),
        project_id: srv.project_id.clone(),
        source: srv.host.clone(),
        dest: None,
        status: MigrationStatus::Accepted,
        created_at: now,
        updated_at: now,
    });
    if let Some(x) = state.server_mut(id) {
        x.task_state = Some("rebuilding".to_owned());
    }
    let delay = state.evacuation.duration;
    let stops = c.mv.at_least(2, 95);
    drop(state);
    let shared = s.clone();
    let id = id.to_owned();
    // The rebuild runs on after the answer, as Nova's conductor and compute do.
    let task = tokio::spawn(async move {
        tokio::time::sleep(delay / 2).await;
        shared.set_migration(mid, MigrationStatus::PreMigrating, None);
        tokio::time::sleep(delay / 2).await;
        shared.finish_evacuation(&id, mid, target, stops);
    });
    s.track(task);
    c.answer(
        StatusCode::OK,
        if c.mv.at_least(2, 14) {
            None
        } else {
            Some(json!({"adminPass": "sim-pass"}))
        },
    )
}

impl Shared {
    fn set_migration(&self, id: u64, status: MigrationStatus, dest: Option<String>) {
        let mut state = self.lock();
        if let Some(m) = state.migrations.iter_mut().find(|m| m.id == id) {
            m.status = status;
            if dest.is_some() {
                m.dest = dest;
            }
            m.updated_at = SystemTime::now();
        }
    }

    /// The end of an evacuation: no host to go to is `error` (the server goes ERROR with
    /// NoValidHost on its old host), an injected failure is `failed`, else the server is
    /// rebuilt on the chosen host and the record is `done`.
    fn finish_evacuation(&self, id: &str, mid: u64, target: Option<String>, stops: bool) {
        let mut state = self.lock();
        let Some(srv) = state.server(id).cloned() else {
            return;
        };
        let dest = match target {
            Some(t) => Some(t).filter(|t| {
                state
                    .host(t)
                    .is_some_and(|h| !h.disabled && state.host_up(h, SystemTime::now()))
            }),
            None => pick_host(&state, Some(&srv.host)),
        };
        let always = state.evacuation.always_fail.contains(id);
        let fail_now = !always && state.evacuation.fail_next > 0;
        if fail_now {
            state.evacuation.fail_next -= 1;
        }
        let dest = if always { None } else { dest };
        let (status, dest_name) = match dest {
            None => {
                let why = if always {
                    format!("Evacuation of instance {id} failed (simulated, every time)")
                } else {
                    "No valid host was found. There are not enough hosts available.".to_owned()
                };
                if let Some(x) = state.server_mut(id) {
                    x.vm_state = VmState::Error;
                    x.task_state = None;
                    x.fault = Some(why);
                }
                (MigrationStatus::Error, None)
            }
            Some(d) if fail_now => {
                if let Some(x) = state.server_mut(id) {
                    x.vm_state = VmState::Error;
                    x.task_state = None;
                    x.host = d.clone();
                    x.fault = Some(format!(
                        "Rebuild of instance {id} failed on {d} (simulated)"
                    ));
                }
                (MigrationStatus::Failed, Some(d))
            }
            Some(d) => {
                if let Some(x) = state.server_mut(id) {
                    x.host = d.clone();
                    x.task_state = None;
                    x.fault = None;
                    if stops && x.vm_state == VmState::Active {
                        x.vm_state = VmState::Stopped;
                    }
                    if x.vm_state == VmState::Error {
                        x.vm_state = VmState::Active;
                    }
                }
                (MigrationStatus::Done, Some(d))
            }
        };
        drop(state);
        self.set_migration(mid, status, dest_name);
    }
}

pub(super) async fn migrations(State(s): Shr, headers: HeaderMap, Query(q): Q) -> Response {
    let c = begin!(s, headers);
    c_admin_or!(c, "os_compute_api:os-migrations:index");
    let state = s.lock();
    let mut rows: Vec<Value> = state
        .migrations
        .iter()
        .filter(|m| q.get("instance_uuid").is_none_or(|v| v == &m.server))
        .filter(|m| q.get("source_compute").is_none_or(|v| v == &m.source))
        .filter(|m| q.get("status").is_none_or(|v| v == m.status.as_str()))
        .filter(|_| q.get("migration_type").is_none_or(|v| v == "evacuation"))
        .map(|m| {
            let mut v = json!({
                "id": m.id, "instance_uuid": m.server, "status": m.status.as_str(),
                "source_compute": m.source, "source_node": m.source,
                "dest_compute": m.dest, "dest_node": m.dest, "dest_host": m.dest.as_ref().map(|_| "192.168.0.1"),
                "old_instance_type_id": 1, "new_instance_type_id": 1, "source_region": "RegionOne",
                "created_at": nova_time(m.created_at), "updated_at": nova_time(m.updated_at),
            });
            if c.mv.at_least(2, 23) {
                v["migration_type"] = json!("evacuation");
            }
            if c.mv.at_least(2, 59) {
                v["uuid"] = json!(m.uuid);
            }
            if c.mv.at_least(2, 80) {
                v["project_id"] = json!(m.project_id);
                v["user_id"] = json!("u-admin");
            }
            v
        })
        .collect();
    rows.reverse(); // newest first, as Nova lists them
    c.answer(StatusCode::OK, Some(json!({"migrations": rows})))
}

fn flavor_json(f: &super::state::Flavor, mv: Mv) -> Value {
    let mut v = json!({"id": f.id, "name": f.name, "vcpus": f.vcpus, "ram": f.ram_mb,
        "disk": f.disk_gb, "OS-FLV-EXT-DATA:ephemeral": 0, "swap": 0, "rxtx_factor": 1.0,
        "os-flavor-access:is_public": true, "OS-FLV-DISABLED:disabled": false, "links": []});
    if mv.at_least(2, 55) {
        v["description"] = Value::Null;
    }
    if mv.at_least(2, 61) {
        v["extra_specs"] = json!(f.extra_specs);
    }
    v
}

pub(super) async fn flavors(State(s): Shr, headers: HeaderMap) -> Response {
    let c = begin!(s, headers);
    let state = s.lock();
    let list: Vec<Value> = state.flavors.iter().map(|f| flavor_json(f, c.mv)).collect();
    c.answer(StatusCode::OK, Some(json!({"flavors": list})))
}

pub(super) async fn flavor(State(s): Shr, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let c = begin!(s, headers);
    let state = s.lock();
    match state.flavors.iter().find(|f| f.id == id) {
        Some(f) => c.answer(
            StatusCode::OK,
            Some(json!({"flavor": flavor_json(f, c.mv)})),
        ),
        None => fault(
            StatusCode::NOT_FOUND,
            &format!("Flavor {id} could not be found."),
        ),
    }
}

pub(super) async fn aggregates(State(s): Shr, headers: HeaderMap) -> Response {
    let c = begin!(s, headers);
    c_admin_or!(c, "os_compute_api:os-aggregates:index");
    let state = s.lock();
    let list: Vec<Value> = state
        .aggregates
        .iter()
        .map(|a| {
            let mut v = json!({"id": a.id, "name": a.name, "availability_zone": null,
                "hosts": a.hosts, "metadata": a.metadata, "deleted": false,
                "created_at": nova_time(SystemTime::now()), "updated_at": null,
                "deleted_at": null});
            if c.mv.at_least(2, 41) {
                v["uuid"] = json!(a.uuid);
            }
            v
        })
        .collect();
    c.answer(StatusCode::OK, Some(json!({"aggregates": list})))
}

/// Glance's version discovery (`GET /image`): 300 with the versions, as Glance answers.
pub(super) async fn image_versions(State(s): Shr) -> Response {
    let base = s.base();
    let v = |id: &str, status: &str| {
        json!({"id": id, "status": status,
               "links": [{"rel": "self", "href": format!("{base}/image/v2/")}]})
    };
    (
        StatusCode::MULTIPLE_CHOICES,
        axum::Json(json!({"versions": [v("v2.16", "CURRENT"), v("v2.15", "SUPPORTED")]})),
    )
        .into_response()
}

/// Glance v2's image, with the image's properties as top-level fields.
pub(super) async fn image(State(s): Shr, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(r) = authenticate(&s, &headers) {
        return r;
    }
    let state = s.lock();
    let Some(i) = state.images.iter().find(|i| i.id == id) else {
        return (
            StatusCode::NOT_FOUND,
            format!("No image found with ID {id}"),
        )
            .into_response();
    };
    let mut v = json!({"id": i.id, "name": i.name, "status": "active", "visibility": "public",
        "protected": false, "disk_format": "raw", "container_format": "bare", "size": 1024,
        "min_ram": 0, "min_disk": 0, "tags": [], "owner": "a0000000000000000000000000000001",
        "os_hidden": false, "self": format!("/v2/images/{id}"), "file": format!("/v2/images/{id}/file"),
        "schema": "/v2/schemas/image"});
    for (k, val) in &i.properties {
        v[k] = json!(val);
    }
    axum::Json(v).into_response()
}
