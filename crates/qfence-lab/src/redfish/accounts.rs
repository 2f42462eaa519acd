//! The session service, the account service, roles and the privilege map.

use super::*;

pub(super) async fn session_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    json_ok(json!({
        "@odata.id": "/redfish/v1/SessionService",
        "@odata.type": "#SessionService.v1_1_9.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": true,
        "SessionTimeout": 1800,
        "Sessions": link("/redfish/v1/SessionService/Sessions"),
    }))
}

pub(super) async fn sessions(State(shared): Shr, headers: HeaderMap) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let members = shared
        .lock()
        .sessions
        .iter()
        .filter(|s| caller.role.has("ConfigureManager") || s.user_name == caller.user_name)
        .map(|s| format!("/redfish/v1/SessionService/Sessions/{}", s.id))
        .collect();
    collection(
        "/redfish/v1/SessionService/Sessions",
        "#SessionCollection.SessionCollection",
        "Session Collection",
        members,
    )
}

pub(super) fn session_body(session: &Session, role: Role) -> Value {
    json!({
        "@odata.id": format!("/redfish/v1/SessionService/Sessions/{}", session.id),
        "@odata.type": "#Session.v1_7_0.Session",
        "Id": session.id,
        "Name": "User Session",
        "UserName": session.user_name,
        "Roles": [role.as_str()],
    })
}

pub(super) fn random_hex(bytes: usize) -> String {
    use ring::rand::SecureRandom as _;
    let mut buf = vec![0u8; bytes];
    // SystemRandom only fails if the OS has no randomness; a fixed fallback is fine for a
    // simulator (it would only make tokens guessable in a lab).
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) async fn create_session(State(shared): Shr, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            return rf_error(
                StatusCode::BAD_REQUEST,
                "Base.1.8.MalformedJSON",
                "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
            );
        }
    };
    let user = request.get("UserName").and_then(Value::as_str);
    let password = request.get("Password").and_then(Value::as_str);
    let (Some(user), Some(password)) = (user, password) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyMissing",
            "The property UserName or Password is a required property and must be included in the request.",
        );
    };
    let mut state = shared.lock();
    let Some(account) = state
        .accounts
        .iter()
        .find(|a| a.user_name == user && a.password == password)
        .cloned()
    else {
        return unauthorized(
            "Base.1.8.AccessDenied",
            "While attempting to establish a connection to the resource, the service denied access.",
        );
    };
    if state.sessions.len() >= state.max_sessions {
        return rf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Base.1.8.SessionLimitExceeded",
            "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
        );
    }
    let session = Session {
        id: random_hex(8),
        token: random_hex(16),
        user_name: account.user_name.clone(),
    };
    let body = session_body(&session, account.role);
    let location = format!("/redfish/v1/SessionService/Sessions/{}", session.id);
    let token = session.token.clone();
    state.sessions.push(session);
    let mut response = (StatusCode::CREATED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&token) {
        headers.insert("X-Auth-Token", v);
    }
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, v);
    }
    response
}

/// A session is visible to its owner and to accounts with `ConfigureManager`.
pub(super) fn session_for<'a>(
    state: &'a BmcState,
    caller: &Caller,
    id: &str,
) -> Result<&'a Session, Response> {
    let session = state
        .sessions
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| not_found("Session", id))?;
    if session.user_name == caller.user_name || caller.role.has("ConfigureManager") {
        Ok(session)
    } else {
        Err(forbidden())
    }
}

pub(super) async fn session(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let state = shared.lock();
    match session_for(&state, &caller, &id) {
        Ok(session) => {
            let role = state
                .accounts
                .iter()
                .find(|a| a.user_name == session.user_name)
                .map_or(Role::ReadOnly, |a| a.role);
            json_ok(session_body(session, role))
        }
        Err(response) => response,
    }
}

pub(super) async fn delete_session(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let mut state = shared.lock();
    if let Err(response) = session_for(&state, &caller, &id) {
        return response;
    }
    state.sessions.retain(|s| s.id != id);
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn account_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let mut body = json!({
        "@odata.id": "/redfish/v1/AccountService",
        "@odata.type": "#AccountService.v1_15_0.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": true,
        "Accounts": link("/redfish/v1/AccountService/Accounts"),
        "Roles": link("/redfish/v1/AccountService/Roles"),
    });
    if shared.lock().publish_privilege_map {
        body["PrivilegeMap"] = link("/redfish/v1/AccountService/PrivilegeMap");
    }
    json_ok(body)
}

pub(super) async fn accounts(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = (1..=shared.lock().accounts.len())
        .map(|i| format!("/redfish/v1/AccountService/Accounts/{i}"))
        .collect();
    collection(
        "/redfish/v1/AccountService/Accounts",
        "#ManagerAccountCollection.ManagerAccountCollection",
        "Accounts Collection",
        members,
    )
}

pub(super) async fn account(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let state = shared.lock();
    let found = id
        .parse::<usize>()
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| state.accounts.get(i));
    let Some(account) = found else {
        return not_found("ManagerAccount", &id);
    };
    // A ManagerAccount needs ConfigureUsers, or ConfigureSelf for one's own.
    if account.user_name != caller.user_name && !caller.role.has("ConfigureUsers") {
        return forbidden();
    }
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/AccountService/Accounts/{id}"),
        "@odata.type": "#ManagerAccount.v1_12_0.ManagerAccount",
        "Id": id,
        "Name": "User Account",
        "UserName": account.user_name,
        "RoleId": account.role.as_str(),
        "Password": null,
        "Enabled": true,
        "Locked": false,
        "Links": {"Role": link(&format!("/redfish/v1/AccountService/Roles/{}", account.role.as_str()))},
    }))
}

pub(super) async fn roles(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    collection(
        "/redfish/v1/AccountService/Roles",
        "#RoleCollection.RoleCollection",
        "Roles Collection",
        Role::ALL
            .iter()
            .map(|r| format!("/redfish/v1/AccountService/Roles/{}", r.as_str()))
            .collect(),
    )
}

pub(super) async fn role(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    let Some(role) = Role::by_id(&id) else {
        return not_found("Role", &id);
    };
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/AccountService/Roles/{id}"),
        "@odata.type": "#Role.v1_3_2.Role",
        "Id": id,
        "RoleId": id,
        "Name": format!("{id} Role"),
        "IsPredefined": true,
        "AssignedPrivileges": role.privileges(),
        "OemPrivileges": [],
    }))
}

pub(super) async fn privilege_map(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    if !shared.lock().publish_privilege_map {
        return not_found("PrivilegeRegistry", "PrivilegeMap");
    }
    // The DMTF default mapping, which this simulator enforces.
    let op = |p: &str| json!([{"Privilege": [p]}]);
    let map = |read: &str, write: &str| json!({"GET": op(read), "HEAD": op(read), "PATCH": op(write), "POST": op(write), "PUT": op(write), "DELETE": op(write)});
    json_ok(json!({
        "@odata.id": "/redfish/v1/AccountService/PrivilegeMap",
        "@odata.type": "#PrivilegeRegistry.v1_1_4.PrivilegeRegistry",
        "Id": "PrivilegeMap",
        "Name": "Privilege Map",
        "PrivilegesUsed": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureComponents", "ConfigureSelf"],
        "Mappings": [
            {"Entity": "ComputerSystem", "OperationMap": map("Login", "ConfigureComponents")},
            {"Entity": "Chassis", "OperationMap": map("Login", "ConfigureComponents")},
            {"Entity": "Manager", "OperationMap": map("Login", "ConfigureManager")},
            {"Entity": "ManagerAccount", "OperationMap": map("ConfigureSelf", "ConfigureUsers")},
            {"Entity": "Role", "OperationMap": map("Login", "ConfigureManager")},
            {"Entity": "Session", "OperationMap": map("ConfigureSelf", "ConfigureSelf")},
        ],
    }))
}
