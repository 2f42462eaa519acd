//! The HTTP side: routes, Redfish's answers and errors, and who may do what.

use super::*;

// ---------------------------------------------------------------------------------------
// HTTP

pub(super) const RESET_TYPES: [&str; 8] = [
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "ForceOn",
    "PowerCycle",
    "Nmi",
];

pub(super) type Shr = State<Arc<Shared>>;

pub(super) fn router(shared: Arc<Shared>, faults: Faults) -> Router {
    let api = Router::new()
        .route(
            "/redfish",
            get(|| async { json_ok(json!({"v1": "/redfish/v1/"})) }),
        )
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{id}", get(system))
        .route(
            "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .route(
            "/redfish/v1/Systems/{id}/ResetActionInfo",
            get(reset_action_info),
        )
        .route("/redfish/v1/Chassis", get(chassis_collection))
        .route("/redfish/v1/Chassis/{id}", get(chassis))
        .route("/redfish/v1/Managers", get(managers))
        .route("/redfish/v1/Managers/{id}", get(manager))
        .route("/redfish/v1/SessionService", get(session_service))
        .route(
            "/redfish/v1/SessionService/Sessions",
            get(sessions).post(create_session),
        )
        .route(
            "/redfish/v1/SessionService/Sessions/{id}",
            get(session).delete(delete_session),
        )
        .route("/redfish/v1/AccountService", get(account_service))
        .route("/redfish/v1/AccountService/Accounts", get(accounts))
        .route("/redfish/v1/AccountService/Accounts/{id}", get(account))
        .route("/redfish/v1/AccountService/Roles", get(roles))
        .route("/redfish/v1/AccountService/Roles/{id}", get(role))
        .route(
            "/redfish/v1/AccountService/PrivilegeMap",
            get(privilege_map),
        )
        .route("/redfish/v1/TaskService", get(task_service))
        .route("/redfish/v1/TaskService/Tasks", get(task_collection))
        .route("/redfish/v1/TaskService/Tasks/{id}", get(task))
        .route(
            "/redfish/v1/TaskService/TaskMonitors/{id}",
            get(task_monitor),
        )
        .fallback(|| async {
            rf_error(
                StatusCode::NOT_FOUND,
                "Base.1.8.ResourceMissingAtURI",
                "The resource at the URI was not found.",
            )
        })
        .method_not_allowed_fallback(|| async {
            rf_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Base.1.8.OperationNotAllowed",
                "The HTTP method is not allowed on this resource.",
            )
        })
        .with_state(shared);
    // Outer router: the layers run before routing, so a trailing slash is stripped first.
    Router::new()
        .fallback_service(api)
        .layer(middleware::map_response(odata_version))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            faults::http_faults(faults.clone(), storm_error, req, next)
        }))
        .layer(middleware::map_request(strip_trailing_slash))
}

pub(super) async fn strip_trailing_slash(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_owned(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

pub(super) async fn odata_version(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert("OData-Version", HeaderValue::from_static("4.0"));
    response
}

pub(super) fn storm_error(status: StatusCode) -> Response {
    rf_error(
        status,
        "Base.1.8.InternalError",
        "The request failed due to an internal service error.  The service is still operational.",
    )
}

pub(super) fn json_ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// A Redfish error body with one extended-info message.
pub(super) fn rf_error(status: StatusCode, message_id: &str, message: &str) -> Response {
    let body = json!({
        "error": {
            "code": "Base.1.8.GeneralError",
            "message": message,
            "@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": message_id,
                "Message": message,
                "Severity": "Critical",
                "Resolution": "None.",
            }],
        }
    });
    (status, axum::Json(body)).into_response()
}

/// Who is calling.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub(super) user_name: String,
    pub(super) role: Role,
}

pub(super) fn unauthorized(message_id: &str, message: &str) -> Response {
    let mut response = rf_error(StatusCode::UNAUTHORIZED, message_id, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"qfence lab BMC\""),
    );
    response
}

pub(super) fn forbidden() -> Response {
    rf_error(
        StatusCode::FORBIDDEN,
        "Base.1.8.InsufficientPrivilege",
        "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
    )
}

pub(super) fn not_found(kind: &str, id: &str) -> Response {
    rf_error(
        StatusCode::NOT_FOUND,
        "Base.1.8.ResourceNotFound",
        &format!("The requested resource of type {kind} named '{id}' was not found."),
    )
}

/// Authenticates with `X-Auth-Token` or Basic, then checks one privilege.
pub(super) fn authorize(
    shared: &Shared,
    headers: &HeaderMap,
    privilege: &str,
) -> Result<Caller, Response> {
    let state = shared.lock();
    let caller = if let Some(token) = headers.get("X-Auth-Token") {
        let token = token.to_str().unwrap_or_default();
        let session = state
            .sessions
            .iter()
            .find(|s| s.token == token)
            .ok_or_else(|| {
                unauthorized(
                    "Base.1.8.NoValidSession",
                    "There is no valid session established with the implementation.",
                )
            })?;
        let account = state
            .accounts
            .iter()
            .find(|a| a.user_name == session.user_name)
            .ok_or_else(|| {
                unauthorized(
                    "Base.1.8.NoValidSession",
                    "There is no valid session established with the implementation.",
                )
            })?;
        Caller {
            user_name: account.user_name.clone(),
            role: account.role,
        }
    } else {
        let denied = || {
            unauthorized(
                "Base.1.8.AccessDenied",
                "While attempting to establish a connection to the resource, the service denied access.",
            )
        };
        let (user, password) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_basic)
            .ok_or_else(denied)?;
        let account = state
            .accounts
            .iter()
            .find(|a| a.user_name == user && a.password == password)
            .ok_or_else(denied)?;
        Caller {
            user_name: account.user_name.clone(),
            role: account.role,
        }
    };
    if caller.role.has(privilege) {
        Ok(caller)
    } else {
        Err(forbidden())
    }
}

pub(super) fn parse_basic(value: &str) -> Option<(String, String)> {
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

pub(super) fn link(path: &str) -> Value {
    json!({"@odata.id": path})
}

pub(super) fn collection(
    path: &str,
    odata_type: &str,
    name: &str,
    members: Vec<String>,
) -> Response {
    let members: Vec<Value> = members.iter().map(|m| link(m)).collect();
    json_ok(json!({
        "@odata.id": path,
        "@odata.type": odata_type,
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members,
    }))
}
