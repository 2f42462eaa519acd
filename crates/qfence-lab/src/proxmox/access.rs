//! `/version`, tickets and `/access/permissions`.

use super::*;

pub(super) async fn version(State(shared): Shr, _: Authed) -> Response {
    let state = shared.lock();
    data(json!({
        "version": state.version,
        "release": state.release,
        "repoid": "5a1f3e2b",
        "console": "xtermjs",
    }))
}

pub(super) async fn create_ticket(
    State(shared): Shr,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = parameters(&uri, &headers, &body);
    let failure = || pve_error(StatusCode::UNAUTHORIZED, "authentication failure");
    let (Some(username), Some(password)) = (params.get("username"), params.get("password")) else {
        return pve_error(StatusCode::BAD_REQUEST, "Parameter verification failed.");
    };
    let userid = match params.get("realm") {
        Some(realm) if !username.contains('@') => format!("{username}@{realm}"),
        _ => username.clone(),
    };
    let now = shared.clock.now();
    // A valid ticket works as the password (renewal).
    let renewing = shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(password)
        .is_some_and(|t| t.userid == userid && t.expires > now);
    let password_ok = shared
        .lock()
        .users
        .iter()
        .any(|u| u.userid == userid && u.password.as_deref() == Some(password.as_str()));
    if !renewing && !password_ok {
        return failure();
    }
    let ticket = format!("PVE:{userid}:{now:08X}::{}", random_token(32));
    let csrf = format!("{now:08X}:{}", random_token(20));
    shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            ticket.clone(),
            Ticket {
                userid: userid.clone(),
                csrf: csrf.clone(),
                expires: now + 2 * 3600,
            },
        );
    data(json!({
        "ticket": ticket,
        "CSRFPreventionToken": csrf,
        "username": userid,
        "cap": {},
    }))
}

pub(super) fn random_token(bytes: usize) -> String {
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut buf = vec![0u8; bytes];
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}

pub(super) async fn permissions(
    State(shared): Shr,
    Authed(caller): Authed,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let state = shared.lock();
    // Whose permissions: one's own, or (for a user) one of its tokens; others need
    // Sys.Audit on /access.
    let subject = match query.get("userid") {
        None => caller.clone(),
        Some(id) if *id == caller.id() => caller.clone(),
        Some(id) => {
            let parsed = match id.split_once('!') {
                Some((u, n)) => Principal::Token {
                    userid: u.to_owned(),
                    name: n.to_owned(),
                },
                None => Principal::User(id.clone()),
            };
            let own_token = matches!(caller, Principal::User(_))
                && matches!(&parsed, Principal::Token { userid, .. } if userid == caller.userid());
            if !own_token && !allowed(&state, &caller, "/access", "Sys.Audit") {
                return forbidden("/access", "Sys.Audit");
            }
            parsed
        }
    };
    let paths: Vec<String> = match query.get("path") {
        Some(p) => vec![p.clone()],
        None => {
            let mut paths: BTreeSet<String> = BTreeSet::from(["/".to_owned()]);
            if let Some(u) = state.users.iter().find(|u| u.userid == subject.userid()) {
                paths.extend(u.acl.iter().map(|a| a.path.clone()));
            }
            if let Principal::Token { userid, name } = &subject
                && let Some(t) = state
                    .tokens
                    .iter()
                    .find(|t| &t.userid == userid && &t.name == name)
            {
                paths.extend(t.acl.iter().map(|a| a.path.clone()));
            }
            paths.into_iter().collect()
        }
    };
    let mut out = Map::new();
    for path in paths {
        let privs = effective(&state, &subject, &path);
        if privs.is_empty() && !query.contains_key("path") {
            continue;
        }
        let entry: Map<String, Value> = privs
            .into_iter()
            .map(|(p, prop)| (p, json!(u8::from(prop))))
            .collect();
        out.insert(path, Value::Object(entry));
    }
    data(Value::Object(out))
}
