//! The HTTP side: routes, PVE's answers and errors, who is asking and what they may do.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::*;

// ---------------------------------------------------------------------------------------
// HTTP

pub(super) type Shr = State<Arc<Shared>>;

pub(super) fn router(shared: Arc<Shared>, faults: Faults) -> Router {
    let api = Router::new()
        .route("/api2/json/version", get(version))
        .route("/api2/json/access/ticket", post(create_ticket))
        .route("/api2/json/access/permissions", get(permissions))
        .route("/api2/json/cluster/status", get(cluster_status))
        .route("/api2/json/cluster/resources", get(cluster_resources))
        .route("/api2/json/cluster/replication", get(replication_config))
        .route(
            "/api2/json/cluster/replication/{id}",
            get(replication_config_one),
        )
        .route("/api2/json/cluster/ha/resources", get(ha_resources))
        .route("/api2/json/cluster/ha/resources/{sid}", get(ha_resource))
        .route("/api2/json/cluster/ha/status/current", get(ha_status))
        .route("/api2/json/nodes", get(nodes))
        .route("/api2/json/nodes/{node}/status", get(node_status))
        .route("/api2/json/nodes/{node}/qemu", get(node_vms))
        .route(
            "/api2/json/nodes/{node}/qemu/{vmid}/status/current",
            get(vm_current),
        )
        .route("/api2/json/nodes/{node}/qemu/{vmid}/config", get(vm_config))
        .route(
            "/api2/json/nodes/{node}/qemu/{vmid}/status/{action}",
            post(vm_action),
        )
        .route("/api2/json/nodes/{node}/tasks", get(tasks))
        .route(
            "/api2/json/nodes/{node}/tasks/{upid}/status",
            get(task_status),
        )
        .route("/api2/json/nodes/{node}/tasks/{upid}/log", get(task_log))
        .route(
            "/api2/json/nodes/{node}/replication",
            get(replication_status_list),
        )
        .route(
            "/api2/json/nodes/{node}/replication/{id}/status",
            get(replication_status_one),
        )
        .route(
            "/api2/json/nodes/{node}/replication/{id}/schedule_now",
            post(replication_schedule_now),
        )
        .fallback(|method: Method, uri: Uri| async move {
            let path = uri.path().strip_prefix("/api2/json").unwrap_or(uri.path());
            pve_error(
                StatusCode::NOT_IMPLEMENTED,
                &format!("Method '{method} {path}' not implemented"),
            )
        })
        .with_state(shared);
    Router::new()
        .fallback_service(api)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            faults::http_faults(faults.clone(), storm_error, req, next)
        }))
}

pub(super) fn storm_error(status: StatusCode) -> Response {
    pve_error(status, "proxy loop detected or server error")
}

pub(super) fn data(value: Value) -> Response {
    (StatusCode::OK, axum::Json(json!({"data": value}))).into_response()
}

/// PVE's error answer. The message also travels in the HTTP reason phrase on real PVE;
/// here it is only in the body, as newer PVE versions also send it.
pub(super) fn pve_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"data": null, "message": format!("{message}\n")})),
    )
        .into_response()
}

pub(super) fn forbidden(path: &str, privilege: &str) -> Response {
    pve_error(
        StatusCode::FORBIDDEN,
        &format!("Permission check failed ({path}, {privilege})"),
    )
}

pub(super) fn no_route() -> Response {
    pve_error(
        StatusCode::from_u16(595).unwrap_or(StatusCode::BAD_GATEWAY),
        "No route to host",
    )
}

/// Who is calling.
#[derive(Debug, Clone)]
pub(super) enum Principal {
    User(String),
    Token { userid: String, name: String },
}

impl Principal {
    /// As PVE writes it in task UPIDs and `userid` parameters.
    pub(super) fn id(&self) -> String {
        match self {
            Self::User(u) => u.clone(),
            Self::Token { userid, name } => format!("{userid}!{name}"),
        }
    }

    pub(super) fn userid(&self) -> &str {
        match self {
            Self::User(u) | Self::Token { userid: u, .. } => u,
        }
    }
}

pub(super) fn authenticate(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    let unauthorized = |m: &str| pve_error(StatusCode::UNAUTHORIZED, m);
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(token) = value.strip_prefix("PVEAPIToken=")
    {
        let (full, secret) = token
            .split_once('=')
            .ok_or_else(|| unauthorized("authentication failure"))?;
        let (userid, name) = full
            .split_once('!')
            .ok_or_else(|| unauthorized("authentication failure"))?;
        let state = shared.lock();
        let known = state
            .tokens
            .iter()
            .any(|t| t.userid == userid && t.name == name && t.secret == secret);
        if !known {
            return Err(unauthorized("authentication failure"));
        }
        return Ok(Principal::Token {
            userid: userid.to_owned(),
            name: name.to_owned(),
        });
    }
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == "PVEAuthCookie")
        .map(|(_, v)| percent_decode(v));
    let Some(ticket) = cookie else {
        return Err(unauthorized("No ticket"));
    };
    let found = shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&ticket)
        .cloned();
    let Some(found) = found.filter(|t| t.expires > shared.clock.now()) else {
        return Err(unauthorized("permission denied - invalid PVE ticket"));
    };
    if *method != Method::GET && *method != Method::HEAD {
        let csrf = headers
            .get("CSRFPreventionToken")
            .and_then(|v| v.to_str().ok());
        if csrf != Some(found.csrf.as_str()) {
            return Err(unauthorized("Permission denied - invalid csrf token"));
        }
    }
    Ok(Principal::User(found.userid))
}

/// The authenticated caller of a request, or PVE's 401 answer: what every handler starts
/// from.
pub(super) struct Authed(pub(super) Principal);

impl FromRequestParts<Arc<Shared>> for Authed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Response> {
        authenticate(shared, &parts.method, &parts.headers).map(Authed)
    }
}

/// A read counted in [`VmReads`] under `K`, then its authenticated caller. Counted as it
/// arrives, before authentication: a refused read is still a read the client made.
pub(super) struct CountedRead<K>(pub(super) Principal, pub(super) PhantomData<K>);

/// Which of [`VmReads`]' counters a [`CountedRead`] adds to.
pub(super) trait ReadKind {
    fn counter(reads: &VmReads) -> &AtomicU64;
}

impl<K: ReadKind> FromRequestParts<Arc<Shared>> for CountedRead<K> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Response> {
        K::counter(&shared.reads).fetch_add(1, Ordering::Relaxed);
        let Authed(caller) = Authed::from_request_parts(parts, shared).await?;
        Ok(CountedRead(caller, PhantomData))
    }
}

/// The kinds of counted read, each naming its counter in [`VmReads`].
macro_rules! read_kinds {
    ($($(#[$doc:meta])* $kind:ident => $counter:ident;)*) => {$(
        $(#[$doc])*
        pub(super) struct $kind;

        impl ReadKind for $kind {
            fn counter(reads: &VmReads) -> &AtomicU64 {
                &reads.$counter
            }
        }
    )*};
}

read_kinds! {
    /// `GET /nodes/{node}/qemu`.
    Listing => listings;
    /// `GET /nodes/{node}/qemu/{vmid}/status/current`.
    StatusCurrent => status_current;
    /// `GET /nodes/{node}/replication`.
    JobListing => job_listings;
    /// `GET /nodes/{node}/replication/{id}/status`.
    JobStatus => job_status;
}

pub(super) fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

/// Every privilege PVE 9 knows (what `root@pam` holds).
pub(super) const ALL_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Group.Allocate",
    "Mapping.Audit",
    "Mapping.Modify",
    "Mapping.Use",
    "Permissions.Modify",
    "Pool.Allocate",
    "Pool.Audit",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "SDN.Allocate",
    "SDN.Audit",
    "SDN.Use",
    "Sys.AccessNetwork",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Incoming",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "User.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Replicate",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

/// Privileges from `acl` that apply on `path`, with their propagate flag.
pub(super) fn acl_privileges(acl: &[Acl], path: &str) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for entry in acl {
        let prefix = if entry.path == "/" {
            "/".to_owned()
        } else {
            format!("{}/", entry.path)
        };
        let applies = entry.path == path || (entry.propagate && path.starts_with(&prefix));
        if applies {
            for p in &entry.privileges {
                let flag = out.entry(p.clone()).or_insert(false);
                *flag |= entry.propagate;
            }
        }
    }
    out
}

/// The privileges `who` has on `path` (name → propagate), as `/access/permissions` shows.
/// More specific ACL entries add to inherited ones (real PVE lets them replace; the
/// simulator's ACLs do not rely on that).
pub(super) fn effective(state: &PveState, who: &Principal, path: &str) -> BTreeMap<String, bool> {
    if who.userid() == "root@pam" && matches!(who, Principal::User(_)) {
        return ALL_PRIVILEGES
            .iter()
            .map(|p| ((*p).to_owned(), true))
            .collect();
    }
    let user_privs = if who.userid() == "root@pam" {
        ALL_PRIVILEGES
            .iter()
            .map(|p| ((*p).to_owned(), true))
            .collect()
    } else {
        state
            .users
            .iter()
            .find(|u| u.userid == who.userid())
            .map(|u| acl_privileges(&u.acl, path))
            .unwrap_or_default()
    };
    match who {
        Principal::User(_) => user_privs,
        Principal::Token { userid, name } => {
            let Some(token) = state
                .tokens
                .iter()
                .find(|t| &t.userid == userid && &t.name == name)
            else {
                return BTreeMap::new();
            };
            if !token.privsep {
                return user_privs;
            }
            let own = acl_privileges(&token.acl, path);
            user_privs
                .into_iter()
                .filter_map(|(p, prop)| own.get(&p).map(|tprop| (p, prop && *tprop)))
                .collect()
        }
    }
}

pub(super) fn allowed(state: &PveState, who: &Principal, path: &str, privilege: &str) -> bool {
    effective(state, who, path).contains_key(privilege)
}

/// The node a request names: 500 for an unknown one (PVE cannot resolve it), 595 for an
/// offline one (the proxied call cannot reach it).
pub(super) fn reach_node(state: &PveState, node: &str) -> Result<(), Response> {
    match state.node(node) {
        None => Err(pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
            ),
        )),
        Some(n) if !n.online() => Err(no_route()),
        Some(_) => Ok(()),
    }
}

/// POST parameters: query string, then a form or JSON body.
pub(super) fn parameters(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
            for (k, v) in map {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(k, text);
            }
        }
    } else {
        out.extend(url::form_urlencoded::parse(body).into_owned());
    }
    out
}
