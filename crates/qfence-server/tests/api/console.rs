//! The web console's routes over plain HTTP: sign-in, every page's success and error paths,
//! roles, the same-origin check on forms, and the live stream's first event. The browser
//! tests (`tests/browser/`) click through the same pages in chromium.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use futures_util::StreamExt;

use super::{ADMIN, Api, OPERATOR, Resp, VIEWER, phase};

const HOST: &str = "console.test:8443";
const ORIGIN: &str = "https://console.test:8443";

/// A console request: the session cookie when `token` is given, a form body when `form` is,
/// and the Origin `origin`.
async fn req(
    api: &Api,
    method: Method,
    path: &str,
    token: Option<&str>,
    form: Option<&str>,
    origin: Option<&str>,
) -> Resp {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, HOST);
    if let Some(t) = token {
        b = b.header(header::COOKIE, format!("other=1; qfence_session={t}"));
    }
    if let Some(o) = origin {
        b = b.header(header::ORIGIN, o);
    }
    let r = match form {
        Some(f) => b
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(f.to_owned()))
            .unwrap(),
        None => b.body(Body::empty()).unwrap(),
    };
    api.send(r).await
}

async fn page(api: &Api, path: &str, token: &str) -> Resp {
    req(api, Method::GET, path, Some(token), None, None).await
}

/// A form posted from this server's pages.
async fn form(api: &Api, path: &str, token: &str, body: &str) -> Resp {
    req(
        api,
        Method::POST,
        path,
        Some(token),
        Some(body),
        Some(ORIGIN),
    )
    .await
}

fn html(r: &Resp) -> &str {
    r.body.as_str().unwrap_or("")
}

fn location(r: &Resp) -> &str {
    r.headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn signing_in_sets_a_strict_http_only_cookie_and_goes_where_asked() {
    let api = Api::new().await;
    phase("no session: every page sends the browser to sign in, remembering where it was");
    for path in [
        "/",
        "/plans/erp-db",
        "/events?kind=alarm",
        "/orchestrators",
        "/sites",
        "/instance-ha",
        "/live/overview",
        "/live/instance-ha",
    ] {
        let r = req(&api, Method::GET, path, None, None, None).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{path}");
        assert!(
            location(&r).starts_with("/login?next=/"),
            "{path}: {}",
            location(&r)
        );
    }
    let r = req(&api, Method::GET, "/", Some("withdrawn"), None, None).await;
    assert_eq!(
        r.status,
        StatusCode::SEE_OTHER,
        "an unknown token is no session"
    );

    let r = req(
        &api,
        Method::GET,
        "/login?next=/plans/erp-db",
        None,
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("value=\"/plans/erp-db\""));

    phase("a good token: the cookie, then the page asked for");
    let body = format!("token={OPERATOR}&next=%2Fplans%2Ferp-db");
    let r = req(
        &api,
        Method::POST,
        "/login",
        None,
        Some(&body),
        Some(ORIGIN),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/plans/erp-db");
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    for part in [
        "qfence_session=operator-token-2",
        "HttpOnly",
        "SameSite=Strict",
        "Secure",
        "Path=/",
    ] {
        assert!(cookie.contains(part), "{cookie} has {part}");
    }

    phase("elsewhere is never a destination");
    let body = format!("token={OPERATOR}&next=%2F%2Fevil.example%2F");
    let r = req(
        &api,
        Method::POST,
        "/login",
        None,
        Some(&body),
        Some(ORIGIN),
    )
    .await;
    assert_eq!(location(&r), "/");

    phase("a wrong token: the form again, with the reason next to the field");
    let r = req(
        &api,
        Method::POST,
        "/login",
        None,
        Some("token=nope&next=%2F"),
        Some(ORIGIN),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(html(&r).contains("field-error") && html(&r).contains("not known"));
    assert!(r.headers.get(header::SET_COOKIE).is_none());

    phase("a sign-in from another site is refused");
    let body = format!("token={OPERATOR}");
    let r = req(
        &api,
        Method::POST,
        "/login",
        None,
        Some(&body),
        Some("https://evil.example"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.headers.get(header::SET_COOKIE).is_none());

    phase("signing out clears the cookie");
    let r = form(&api, "/logout", VIEWER, "").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        r.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

#[tokio::test]
async fn the_stylesheet_and_script_are_served_without_a_session() {
    let api = Api::new().await;
    let css = req(&api, Method::GET, "/console.css", None, None, None).await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(css.content_type.starts_with("text/css"));
    let js = req(&api, Method::GET, "/console.js", None, None, None).await;
    assert_eq!(js.status, StatusCode::OK);
    assert!(js.content_type.starts_with("text/javascript"));
    assert!(html(&js).contains("EventSource"));
}

#[tokio::test]
async fn the_overview_lists_every_plan_with_verdicts_in_words() {
    let api = Api::new().await;
    // dc2's host is off at its BMC: the engine's first readings show it FENCED.
    api.lab
        .verdict_is("dc2", qfence_runtime::dto::VerdictDto::Fenced)
        .await
        .unwrap();
    let r = page(&api, "/", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type.starts_with("text/html"));
    let h = html(&r);
    assert!(h.contains("href=\"/plans/erp-db\""));
    assert!(
        h.contains("dc2 FENCED") && h.contains("verdict fenced"),
        "{h}"
    );
    assert!(h.contains("dc1 owner"));
    assert!(h.contains("data-live=\"/live/overview\""));
    assert!(h.contains("grafana") && h.contains("(viewer)"));

    // Not to be framed by another site (its buttons fail plans over), only its own script.
    for path in [
        "/",
        "/login",
        "/plans/erp-db",
        "/events",
        "/orchestrators",
        "/sites",
        "/instance-ha",
    ] {
        let r = page(&api, path, VIEWER).await;
        assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY", "{path}");
        let csp = r.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
            "{path}: {csp}"
        );
        assert_eq!(r.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
}

#[tokio::test]
async fn the_plan_page_offers_actions_by_role_and_draws_the_plan() {
    let api = Api::new().await;
    let viewer = page(&api, "/plans/erp-db", VIEWER).await;
    assert_eq!(viewer.status, StatusCode::OK);
    let h = html(&viewer);
    assert!(h.contains("<svg") && h.contains("Instance at dc1") && h.contains("Instance at dc2"));
    for part in [
        "power.off",
        "bmc-dc1",
        "fgt-edge",
        "lab-redfish",
        "lab-proxmox",
        "Secret",
    ] {
        assert!(h.contains(part), "the diagram shows {part}");
    }
    assert!(
        !h.contains("action=\"/plans/erp-db/actions\""),
        "a viewer gets no action form"
    );
    assert!(h.contains("need an operator token"));
    assert!(
        h.contains("href=\"/events?plan=erp-db\""),
        "the plan's records are a click away"
    );

    for token in [OPERATOR, ADMIN] {
        let r = page(&api, "/plans/erp-db", token).await;
        let h = html(&r);
        assert!(h.contains("action=\"/plans/erp-db/actions\""));
        assert!(h.contains("name=\"expected_generation\" value=\"1\""));
        let switchover = h
            .split("id=\"sw-site\"")
            .nth(1)
            .and_then(|rest| rest.split("</select>").next())
            .expect("the switchover's target list");
        assert!(switchover.contains("value=\"dc2\""));
        assert!(
            !switchover.contains("value=\"dc1\""),
            "the owner is no target"
        );
    }

    let r = page(&api, "/plans/no-such-plan", VIEWER).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(html(&r).contains("does not exist"));
    let r = page(&api, "/plans/bad%20name", VIEWER).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn the_dry_run_is_shown_on_the_page_and_changes_nothing() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let r = page(&api, "/plans/erp-db?dry=switchover&target=dc2", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"dry-result\""), "{}", html(&r));
    assert!(html(&r).contains("Nothing was changed"));
    let r = page(&api, "/plans/erp-db?dry=explode", VIEWER).await;
    assert!(html(&r).contains("is not a dry run"));
    let r = page(&api, "/plans/erp-db?dry=switchover", VIEWER).await;
    assert!(html(&r).contains("needs a target site"));
    let r = page(&api, "/plans/erp-db?dry=switchover&target=mars", VIEWER).await;
    assert!(html(&r).contains("id=\"dry-error\""), "{}", html(&r));
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn an_action_is_confirmed_first_then_carried_out_with_the_generation_seen() {
    let api = Api::new().await;
    let before = api.snapshot().await;

    phase("the first post is the confirmation step: the dry run, nothing done");
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=dc2&reason=patching+dc1&expected_generation=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let h = html(&r);
    assert!(h.contains("Switch erp-db over to dc2?"));
    assert!(h.contains("name=\"confirmed\" value=\"yes\""));
    assert!(h.contains("value=\"patching dc1\""), "the reason is kept");
    assert!(h.contains("id=\"dry-result\""));
    assert!(h.contains(">Switch over to dc2</button>"));
    assert_eq!(api.snapshot().await, before, "nothing changed");

    phase("confirming a site fenced by hand says what the operator takes on");
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=confirm_fenced&site=dc2&reason=unplugged&expected_generation=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("FENCED on your word"), "{}", html(&r));
    assert!(html(&r).contains(">Confirm dc2 stopped</button>"));
    assert_eq!(api.snapshot().await, before, "nothing changed");

    phase("a stale generation is refused on the confirmation page, reason kept");
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=dc2&reason=patching+dc1&expected_generation=7&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(html(&r).contains("not 7") && html(&r).contains("value=\"patching dc1\""));
    assert_eq!(api.snapshot().await, before);

    phase("confirmed at the generation seen: done, and the page says so");
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=dc2&reason=patching+dc1&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", html(&r));
    assert!(
        location(&r).starts_with("/plans/erp-db?notice=switchover"),
        "{}",
        location(&r)
    );
    // The engine carries it out: dc2 owns erp-db at generation 2.
    api.lab.owner_is("dc2").await.unwrap();
    assert_eq!(api.generation("erp-db").await, 2);
    let r = page(&api, location(&r), OPERATOR).await;
    assert!(html(&r).contains("class=\"notice\""));
}

#[tokio::test]
async fn automatic_actions_are_paused_and_resumed_with_confirmation() {
    let api = Api::new().await;
    let r = page(&api, "/plans/erp-db", OPERATOR).await;
    assert!(html(&r).contains("id=\"pause\""));
    assert!(!html(&r).contains("id=\"resume\""));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=pause&site=&reason=storage+firmware&expected_generation=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("Pause automatic actions on erp-db?"));
    assert!(html(&r).contains("starts no failover"));
    assert!(!html(&r).contains("id=\"c-site\""), "no site to show");
    let plans = api.get("/api/v1/plans/erp-db", OPERATOR).await;
    assert_eq!(plans.body["paused"], false, "not before confirming");

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=pause&site=&reason=storage+firmware&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", html(&r));
    api.paused_is(true).await;
    let plans = api.get("/api/v1/plans/erp-db", OPERATOR).await;
    assert_eq!(plans.body["paused"], true);
    let r = page(&api, "/plans/erp-db", OPERATOR).await;
    assert!(html(&r).contains("id=\"resume\"") && !html(&r).contains("id=\"pause\""));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=resume&site=&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", html(&r));
    api.paused_is(false).await;
    let plans = api.get("/api/v1/plans/erp-db", OPERATOR).await;
    assert_eq!(plans.body["paused"], false);

    let r = form(
        &api,
        "/plans/erp-db/actions",
        VIEWER,
        "op=pause&site=&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_standby_site_goes_into_maintenance_and_back_with_the_generation_seen() {
    let api = Api::new().await;
    let r = page(&api, "/plans/erp-db", OPERATOR).await;
    assert!(html(&r).contains("id=\"maintenance\""));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=maintenance&site=dc2&enabled=on&reason=firmware&expected_generation=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("Take dc2 of erp-db into maintenance?"));
    assert!(html(&r).contains("neither fails erp-db over to it"));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=maintenance&site=dc2&enabled=maybe&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("is neither on nor off"));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=maintenance&site=dc2&enabled=on&reason=firmware&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", html(&r));
    let r = page(&api, "/", VIEWER).await;
    assert!(html(&r).contains("· maintenance"), "{}", html(&r));

    phase("the owner cannot go into maintenance: refused on the confirmation page");
    let generation = api.generation("erp-db").await;
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        &format!(
            "op=maintenance&site=dc1&enabled=on&expected_generation={generation}&confirmed=yes"
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", html(&r));
    assert!(html(&r).contains("id=\"action-error\""));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        &format!(
            "op=maintenance&site=dc2&enabled=off&expected_generation={generation}&confirmed=yes"
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", html(&r));
    let r = page(&api, "/", VIEWER).await;
    assert!(!html(&r).contains("· maintenance"));
}

#[tokio::test]
async fn actions_are_refused_to_viewers_other_sites_and_bad_fields() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let confirmed = "op=failover&site=dc2&expected_generation=1&confirmed=yes";

    let r = form(&api, "/plans/erp-db/actions", VIEWER, confirmed).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(html(&r).contains("your role (viewer) may not fail over"));

    for origin in [Some("https://evil.example"), Some("null"), None] {
        let r = req(
            &api,
            Method::POST,
            "/plans/erp-db/actions",
            Some(OPERATOR),
            Some(confirmed),
            origin,
        )
        .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{origin:?}");
        assert!(html(&r).contains("not sent from this console"));
    }
    // A Referer from this server is enough when a browser sends no Origin.
    let r = api
        .send(
            Request::builder()
                .method(Method::POST)
                .uri("/plans/erp-db/actions")
                .header(header::HOST, HOST)
                .header(header::REFERER, format!("{ORIGIN}/plans/erp-db"))
                .header(header::COOKIE, format!("qfence_session={OPERATOR}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("op=switchover&site=dc2&expected_generation=1"))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "the confirmation step");

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=confirm_fenced&site=dc2&reason=+&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("id=\"reason-error\""));
    assert!(html(&r).contains("value=\"dc2\""), "the site is kept");

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=dc2&reason=x&expected_generation=one&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("is not a generation"));
    assert!(html(&r).contains("value=\"x\""), "the reason is kept");

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("pick a site"));

    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=explode&expected_generation=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("is not an action"));

    phase("the backend's refusals are shown on the confirmation page");
    // The owner cannot go into maintenance (the runtime refuses it at once; a failover it
    // accepts and the engine fences the owner itself).
    let owner = "op=maintenance&site=dc1&enabled=on&expected_generation=1&confirmed=yes";
    let r = form(&api, "/plans/erp-db/actions", OPERATOR, owner).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "dc1 owns erp-db");
    assert!(html(&r).contains("id=\"action-error\""));
    let r = form(&api, "/plans/no-such/actions", OPERATOR, confirmed).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        api.snapshot().await,
        before,
        "nothing was changed by any of them"
    );
}

#[tokio::test]
async fn the_events_page_filters_pages_and_keeps_a_bad_filter() {
    let api = Api::new().await;
    // More records than a page: operators pausing and resuming, and the engine's decisions.
    for i in 0..4 {
        form(
            &api,
            "/plans/erp-db/actions",
            OPERATOR,
            &format!("op=pause&site=&reason=cycle+{i}&expected_generation=1&confirmed=yes"),
        )
        .await;
        form(
            &api,
            "/plans/erp-db/actions",
            OPERATOR,
            "op=resume&site=&expected_generation=1&confirmed=yes",
        )
        .await;
    }
    let decision = qfence_server::testing::lab::eventually(
        std::time::Duration::from_secs(30),
        "a decision of erp-db in the log",
        || async {
            api.lab.events().into_iter().rev().find(|e| {
                e.kind == qfence_runtime::events::EventKind::Decision
                    && e.plan.as_deref() == Some("erp-db")
            })
        },
    )
    .await
    .unwrap();
    let r = page(&api, "/events?limit=3", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    let h = html(&r);
    assert!(
        h.contains("id=\"next-page\"") && h.contains("/events?limit=3&#38;after="),
        "{h}"
    );

    let r = page(&api, "/events?kind=decision&plan=erp-db&limit=100", VIEWER).await;
    assert!(
        html(&r).contains(&format!("<td class=\"num\">{}</td>", decision.seq)),
        "the decision, record {}: {}",
        decision.seq,
        html(&r)
    );
    assert!(!html(&r).contains("id=\"next-page\""));
    let r = page(&api, "/events?kind=alarm", VIEWER).await;
    assert!(html(&r).contains("No records match"));

    for (q, field, says) in [
        (
            "kind=decisoin&plan=erp-db",
            "f-kind",
            "is not a kind of record",
        ),
        ("after=abc&plan=erp-db", "f-after", "is not a whole number"),
        ("limit=0&plan=erp-db", "f-limit", "out of range"),
        ("limit=5000&plan=erp-db", "f-limit", "out of range"),
    ] {
        let r = page(&api, &format!("/events?{q}"), VIEWER).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{q}");
        let h = html(&r);
        assert!(h.contains(says), "{q}: {h}");
        assert!(h.contains(&format!("id=\"{field}\"")) && h.contains("aria-invalid=\"true\""));
        assert!(
            h.contains("value=\"erp-db\""),
            "{q}: the rest of the filter is kept"
        );
    }
}

#[tokio::test]
async fn the_orchestrators_page_lists_the_cluster() {
    let api = Api::new().await;
    let r = page(&api, "/orchestrators", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    // The lab runs one orchestrator: a one-voter cluster.
    assert!(html(&r).contains("dc1-a"), "dc1-a");
}

#[tokio::test]
async fn a_console_action_on_a_follower_is_carried_to_the_leader() {
    let api = Api::follower().await;
    let r = form(
        &api,
        "/plans/erp-db/actions",
        OPERATOR,
        "op=switchover&site=dc2&expected_generation=1&confirmed=yes",
    )
    .await;
    assert_ne!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    let leader = api.lab.leader.as_ref().unwrap();
    assert!(
        leader
            .engine
            .events()
            .iter()
            .any(|e| e.actor == "token:oncall"
                && e.message.contains("switchover of erp-db requested")),
        "the leader recorded the console's switchover"
    );
}

/// The first event of a live stream (it is sent at once).
async fn first_event(api: &Api, path: &str) -> String {
    let resp = tower::ServiceExt::oneshot(
        api.app.clone(),
        Request::builder()
            .uri(path)
            .header(header::COOKIE, format!("qfence_session={VIEWER}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = resp.into_body().into_data_stream();
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), body.next())
        .await
        .expect("an event at once")
        .expect("a chunk")
        .expect("no error");
    String::from_utf8_lossy(&first).into_owned()
}

#[tokio::test]
async fn a_live_stream_ends_when_the_server_shuts_down() {
    // A graceful shutdown waits for the calls in flight: an open console tab must not be one
    // of them forever.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let api = Api::with_config(&qfence_server::ApiConfig {
        shutdown: shutdown.clone(),
        ..qfence_server::ApiConfig::default()
    })
    .await;
    let resp = tower::ServiceExt::oneshot(
        api.app.clone(),
        Request::builder()
            .uri("/live/overview")
            .header(header::COOKIE, format!("qfence_session={VIEWER}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    let mut body = resp.into_body().into_data_stream();
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), body.next())
        .await
        .expect("the first event at once");
    assert!(first.is_some());
    shutdown.cancel();
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(chunk) = body.next().await {
            chunk.expect("no error");
        }
    })
    .await;
    assert!(end.is_ok(), "the stream ended once the server shut down");
}

#[tokio::test]
async fn the_live_streams_send_the_page_parts_at_once() {
    let api = Api::new().await;
    let text = first_event(&api, "/live/overview").await;
    assert!(text.starts_with("event: overview-body\n"), "{text}");
    assert!(text.contains("erp-db"));
    let text = first_event(&api, "/live/plans/erp-db").await;
    assert!(text.starts_with("event: plan-status-live\n"), "{text}");
    assert!(text.contains("data-generation=\"1\""));
}

#[tokio::test]
async fn the_instance_ha_page_of_an_orchestrator_without_a_cloud_says_so() {
    let api = Api::new().await;
    let r = page(&api, "/instance-ha", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK, "a viewer may see it");
    let h = html(&r);
    assert!(h.contains("id=\"iha-empty\""), "{h}");
    assert!(h.contains("No Instance HA cloud is configured"), "{h}");
    assert!(h.contains("href=\"/instance-ha\">Instance HA</a>"), "{h}");
    let text = first_event(&api, "/live/instance-ha").await;
    assert!(text.starts_with("event: iha-clouds\n"), "{text}");
    assert!(text.contains("No Instance HA cloud"), "{text}");
}

#[tokio::test]
async fn the_sites_page_and_the_overview_filters_answer_over_http() {
    let api = Api::new().await;
    phase("the sites page: every site, its orchestrators, what it owns");
    let r = page(&api, "/sites", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    let h = html(&r);
    for want in [
        "id=\"site-dc1\"",
        "id=\"site-dc2\"",
        "dc1-a",
        "Owns 1 plan",
        "/plans/erp-db",
    ] {
        assert!(h.contains(want), "{want} in {h}");
    }

    phase("the overview's filters: kept in the form, the live part asked with them");
    let r = page(&api, "/?name=erp&owner=dc1", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    let h = html(&r);
    assert!(
        h.contains("data-live=\"/live/overview?owner=dc1&#38;name=erp\""),
        "{h}"
    );
    assert!(h.contains("value=\"erp\""), "{h}");
    assert!(h.contains("href=\"/plans/erp-db\""), "{h}");
    let r = page(&api, "/?name=nothing-like-it", VIEWER).await;
    assert!(html(&r).contains("No plan matches these filters"));
    let r = page(&api, "/?page=0", VIEWER).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("not a page number"));
}

/// The `id`'s `<select>` in a page part: its options' HTML.
fn select_of<'a>(html: &'a str, id: &str) -> Option<&'a str> {
    html.split(&format!("id=\"{id}\""))
        .nth(1)
        .and_then(|rest| rest.split("</select>").next())
}

/// The next event named `name` on an SSE body whose data `want` accepts (the data's lines
/// joined), read for at most `limit`.
async fn next_event<S, E>(
    body: &mut S,
    buf: &mut String,
    name: &str,
    limit: std::time::Duration,
    want: impl Fn(&str) -> bool,
) -> String
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let mut lines = event.lines();
            if lines.next() != Some(&format!("event: {name}")) {
                continue;
            }
            let data: Vec<&str> = lines.filter_map(|l| l.strip_prefix("data: ")).collect();
            let data = data.join("\n");
            if want(&data) {
                return data;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap_or_else(|_| panic!("no {name} event as wanted within {limit:?}"))
            .expect("the stream goes on")
            .expect("no error");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_live_stream_sends_the_actions_of_the_plans_new_state() {
    let api = Api::new().await;
    let resp = tower::ServiceExt::oneshot(
        api.app.clone(),
        Request::builder()
            .uri("/live/plans/erp-db")
            .header(header::COOKIE, format!("qfence_session={OPERATOR}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    let mut buf = String::new();
    let wait = std::time::Duration::from_secs(60);

    phase("at once: generation 1's actions, a switchover to dc2 (the owner is no target)");
    let first = next_event(&mut body, &mut buf, "plan-actions", wait, |_| true).await;
    assert!(
        first.contains("name=\"expected_generation\" value=\"1\""),
        "{first}"
    );
    let targets = select_of(&first, "sw-site").expect("a switchover form");
    assert!(targets.contains("value=\"dc2\"") && !targets.contains("value=\"dc1\""));

    phase("paused through the API: no move offered, resume instead of pause");
    // A state that holds until it is changed: the stream cannot miss it between two polls.
    let r = api
        .post(
            "/api/v1/plans/erp-db/pause",
            OPERATOR,
            serde_json::json!({"reason": "storage firmware"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let paused = next_event(&mut body, &mut buf, "plan-actions", wait, |d| {
        d.contains("id=\"switchover-unavailable\"")
    })
    .await;
    assert!(
        paused.contains("the plan is paused: resume it first"),
        "{paused}"
    );
    assert!(!paused.contains("value=\"switchover\""), "{paused}");
    assert!(!paused.contains("value=\"failover\""), "{paused}");
    assert!(paused.contains("value=\"resume\"") && !paused.contains("value=\"pause\""));

    phase("resumed, then a switchover through the API");
    let r = api
        .post(
            "/api/v1/plans/erp-db/resume",
            OPERATOR,
            serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    next_event(&mut body, &mut buf, "plan-actions", wait, |d| {
        d.contains("id=\"sw-site\"")
    })
    .await;
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            serde_json::json!({"target": "dc2", "expected_generation": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");

    phase("committed: generation 2's actions, a switchover back to dc1");
    let after = next_event(&mut body, &mut buf, "plan-actions", wait, |d| {
        d.contains("id=\"sw-site\"") && d.contains("owned by dc2")
    })
    .await;
    assert!(
        after.contains("name=\"expected_generation\" value=\"2\"")
            && !after.contains("name=\"expected_generation\" value=\"1\""),
        "every form carries the new generation: {after}"
    );
    let targets = select_of(&after, "sw-site").expect("a switchover form");
    assert!(
        targets.contains("value=\"dc1\"") && !targets.contains("value=\"dc2\""),
        "{targets}"
    );
    assert!(after.contains("owned by dc2"), "{after}");
}
