//! `/controllers`, `/controllers/new` (four steps) and `/controllers/{name}/test`.

use axum::http::StatusCode;

use super::*;

/// Step 1 of a new Redfish BMC at dc1 that dc2 may call too.
fn step1() -> Vec<(&'static str, &'static str)> {
    vec![
        ("step", "1"),
        ("name", "bmc-dc3"),
        ("type", "redfish"),
        ("site", "dc1"),
        ("reach", "dc2"),
        ("endpoint", "https://127.0.0.1:9443"),
        ("username", "qfence"),
        ("tls_mode", "insecure"),
    ]
}

/// [`step1`] pointed at `c`'s lab BMC of dc1 (a real Redfish simulator), for the steps that
/// reach the target.
fn step1_at_lab(c: &Console) -> Vec<(&'static str, &'static str)> {
    let url: &'static str = Box::leak(c.lab.sims.bmc1.base_url().into_boxed_str());
    let mut f = step1();
    f.retain(|(k, _)| *k != "endpoint");
    f.push(("endpoint", url));
    f
}

/// The hidden fields a page carries, as the browser sends them back.
fn hidden(p: &Page) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, _) in p.body.match_indices("<input type=\"hidden\" name=\"") {
        let rest = &p.body[i + "<input type=\"hidden\" name=\"".len()..];
        let name = &rest[..rest.find('"').unwrap()];
        let v = &rest[rest.find("value=\"").unwrap() + 7..];
        let value = unescape(&v[..v.find('"').unwrap()]);
        if name != "step" {
            out.push((name.to_owned(), value));
        }
    }
    out
}

async fn controller_names(c: &Console) -> Vec<String> {
    c.backend
        .controllers()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect()
}

#[tokio::test]
async fn only_admins_register_and_test() {
    let c = Console::new().await;
    for t in [VIEWER, OPERATOR] {
        let p = c.get("/controllers/new", t).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN);
        let p = c.post("/controllers/new", t, &step1()).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN);
        let p = c.post("/controllers/bmc-dc1/test", t, &[]).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN);
        phase("The list is for everyone, without the admin's buttons");
        let p = c.get("/controllers", t).await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(p.body.contains("data-controller=\"bmc-dc1\""));
        assert!(!p.body.contains("/controllers/bmc-dc1/test"));
        assert!(!p.body.contains("/controllers/new"));
    }
    let p = c.get("/controllers", ADMIN).await;
    assert!(p.body.contains("action=\"/controllers/bmc-dc1/test\""));
    assert!(p.has("lab-redfish"), "the secret's name, never its value");
    assert_eq!(controller_names(&c).await.len(), 5);
}

#[tokio::test]
async fn step_1_offers_types_and_sites() {
    let c = Console::new().await;
    let p = c.get("/controllers/new", ADMIN).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(
        p.body
            .contains("aria-current=\"step\">1. Type and connection")
    );
    assert_eq!(
        p.options_of("type"),
        vec![
            "redfish",
            "ipmi",
            "proxmox",
            "fortigate",
            "docker",
            "postgres",
            "fence-agent",
            "nova",
            "agent"
        ]
    );
    assert_eq!(p.options_of("site"), vec!["dc1", "dc2"]);
    assert!(p.body.contains("data-types=\"proxmox\""), "per-type fields");
}

#[tokio::test]
async fn a_bad_step_1_is_refused_next_to_its_fields_keeping_what_was_typed() {
    let c = Console::new().await;
    let mut f = step1();
    f.retain(|(k, _)| *k != "endpoint");
    f.push(("endpoint", "http://user:hunter2@127.0.0.1:9443"));
    f.retain(|(k, _)| *k != "name");
    f.push(("name", "bmc-dc1"));
    f.push(("timeout_seconds", "soon"));
    let p = c.post("/controllers/new", ADMIN, &f).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", p.body);
    assert!(
        p.body.contains("aria-current=\"step\">1."),
        "still at step 1"
    );
    assert!(
        p.errors_at("name")[0].contains("already exists"),
        "{}",
        p.body
    );
    assert!(
        p.errors_at("endpoint")
            .iter()
            .any(|m| m.contains("inline credentials are refused")),
        "{}",
        p.body
    );
    assert!(!p.body.contains("hunter2"), "the password is not sent back");
    assert_eq!(
        p.value_of("endpoint").as_deref(),
        Some("http://user@127.0.0.1:9443")
    );
    assert!(!p.errors_at("timeout_seconds").is_empty(), "{}", p.body);
    // The missing secret belongs to step 2: not a refusal yet.
    assert!(p.errors_at("secret").is_empty());
    assert_eq!(p.value_of("timeout_seconds").as_deref(), Some("soon"));
    assert_eq!(p.value_of("username").as_deref(), Some("qfence"));
    assert_eq!(p.value_of("site").as_deref(), Some("dc1"));
    assert!(p.body.contains("name=\"reach\" value=\"dc2\" checked"));
}

#[tokio::test]
async fn steps_carry_everything_typed_and_back_loses_nothing() {
    let c = Console::new().await;
    let p = c.post("/controllers/new", ADMIN, &step1()).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("aria-current=\"step\">2. Credentials"));
    let carried = hidden(&p);
    for (k, v) in step1().into_iter().skip(1) {
        assert!(
            carried.iter().any(|(hk, hv)| hk == k && hv == v),
            "{k}={v} travels with step 2: {carried:?}"
        );
    }
    phase("A secret that is not a name is refused next to the field");
    let mut f: Vec<(String, String)> = carried.clone();
    f.push(("step".into(), "2".into()));
    f.push(("secret".into(), "not a name!".into()));
    let p = c.post("/controllers/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(p.body.contains("aria-current=\"step\">2."));
    assert!(!p.errors_at("secret").is_empty(), "{}", p.body);
    assert_eq!(p.value_of("secret").as_deref(), Some("not a name!"));
    phase("A pasted credential is refused and not sent back");
    let token = "3f1c2d9e-8a7b-4c6d-9e0f-1a2b3c4d5e6f";
    let mut f = carried.clone();
    f.push(("step".into(), "2".into()));
    f.push(("secret".into(), token.into()));
    let p = c.post("/controllers/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(p.errors_at("secret")[0].contains("not the name of a secret"));
    assert!(!p.body.contains(token), "the credential is not echoed");
    phase("Back to step 1 keeps every value");
    let mut f = carried.clone();
    f.push(("step".into(), "2".into()));
    f.push(("secret".into(), "lab-redfish".into()));
    f.push(("action".into(), "back".into()));
    let p = c.post("/controllers/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("aria-current=\"step\">1."));
    assert_eq!(
        p.value_of("endpoint").as_deref(),
        Some("https://127.0.0.1:9443")
    );
    assert_eq!(p.value_of("name").as_deref(), Some("bmc-dc3"));
    assert!(
        hidden(&p)
            .iter()
            .any(|(k, v)| k == "secret" && v == "lab-redfish")
    );
    assert!(!controller_names(&c).await.contains(&"bmc-dc3".to_owned()));
}

fn refs(f: &[(String, String)]) -> Vec<(&str, &str)> {
    f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test]
async fn testing_a_registered_controller_shows_its_grades() {
    let c = Console::new().await;
    let p = c.post("/controllers/bmc-dc1/test", ADMIN, &[]).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("data-capability=\"power.off\""));
    assert!(p.body.contains("class=\"grade "));
    let p = c.post("/controllers/nope/test", ADMIN, &[]).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    let p = c.get("/controllers", ADMIN).await;
    let row = &p.body[p.body.find("data-controller=\"bmc-dc1\"").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(!row.contains("never"), "tested now: {row}");
    assert!(row.contains("power.off"), "with its grades: {row}");
}

/// Posts the page's hidden fields plus `extra` from `step`.
async fn go(c: &Console, from: &Page, step: &str, extra: &[(&str, &str)]) -> Page {
    let mut f = hidden(from);
    f.push(("step".into(), step.into()));
    for (k, v) in extra {
        f.push(((*k).into(), (*v).into()));
    }
    c.post("/controllers/new", ADMIN, &refs(&f)).await
}

#[tokio::test]
async fn the_four_steps_end_in_a_registered_controller_with_its_pin() {
    let c = Console::new().await;
    let mut f = step1_at_lab(&c);
    f.retain(|(k, _)| *k != "tls_mode");
    let s2 = c.post("/controllers/new", ADMIN, &f).await;
    assert_eq!(s2.status, StatusCode::OK, "{}", s2.body);
    phase("Step 2 → 3: the connectivity test shows identity and the fingerprint to pin");
    let s3 = go(&c, &s2, "2", &[("secret", "lab-redfish")]).await;
    assert_eq!(s3.status, StatusCode::OK, "{}", s3.body);
    assert!(s3.body.contains("aria-current=\"step\">3."));
    // No TLS mode chosen: reached, its certificate shown to be pinned.
    assert!(
        s3.has("Reached, but its certificate is not trusted yet"),
        "{}",
        s3.body
    );
    let fp_at = s3.body.find("id=\"fingerprint\">").expect("a fingerprint") + 17;
    let fp = &s3.body[fp_at..fp_at + s3.body[fp_at..].find('<').unwrap()];
    assert!(fp.starts_with("sha256:"), "{fp}");
    assert!(s3.body.contains("name=\"pin_fingerprint\""));
    phase("Step 3 → 4 with the pin ticked: the grades, and the pin in what is registered");
    let s4 = go(&c, &s3, "3", &[("pin_fingerprint", "true")]).await;
    assert_eq!(s4.status, StatusCode::OK, "{}", s4.body);
    assert!(s4.body.contains("aria-current=\"step\">4."));
    assert!(s4.body.contains("data-capability=\"power.off\""));
    assert!(
        s4.body.contains(&format!("&#34;pin&#34;: &#34;{fp}&#34;")),
        "{}",
        s4.body
    );
    phase("Back to step 3 tests again and keeps the pin ticked");
    let back = go(&c, &s4, "4", &[("action", "back")]).await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.body);
    assert!(back.body.contains("aria-current=\"step\">3."));
    assert!(back.has("Reachable."), "{}", back.body);
    assert!(
        back.body
            .contains("name=\"pin_fingerprint\" value=\"true\" checked"),
        "{}",
        back.body
    );
    let s4 = go(&c, &back, "3", &[("pin_fingerprint", "true")]).await;
    assert!(s4.body.contains(&format!("&#34;pin&#34;: &#34;{fp}&#34;")));
    phase("Register");
    let done = go(&c, &s4, "4", &[("action", "register")]).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), "/controllers?registered=bmc-dc3");
    let list = c.get(done.location(), ADMIN).await;
    assert!(list.body.contains("id=\"registered\""));
    assert!(list.body.contains("data-controller=\"bmc-dc3\""));
    let row = &list.body[list.body.find("data-controller=\"bmc-dc3\"").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains("power.off") && !row.contains("never"),
        "tested once registered: {row}"
    );
    let base = c.backend.config_source().await.unwrap();
    assert!(
        base.contains(fp),
        "the pin is in the configuration in force"
    );
    phase("The same name again is refused at step 1");
    let again = c.post("/controllers/new", ADMIN, &step1()).await;
    assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(again.errors_at("name")[0].contains("already exists"));
}

#[tokio::test]
async fn a_pin_is_never_moved_to_a_certificate_the_user_did_not_see() {
    let c = Console::new().await;
    let s2 = c.post("/controllers/new", ADMIN, &step1_at_lab(&c)).await;
    let s3 = go(&c, &s2, "2", &[("secret", "lab-redfish")]).await;
    assert_eq!(s3.status, StatusCode::OK);
    // The page as if the test had shown another certificate than the one the target shows now.
    let seen = format!("sha256:{}", "ab".repeat(32));
    let mut f: Vec<(String, String)> = hidden(&s3)
        .into_iter()
        .filter(|(k, _)| k != "probed_fingerprint")
        .collect();
    f.push(("probed_fingerprint".into(), seen.clone()));
    f.push(("step".into(), "3".into()));
    f.push(("pin_fingerprint".into(), "true".into()));
    let p = c.post("/controllers/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(
        p.body.contains("aria-current=\"step\">3."),
        "back to the test"
    );
    assert!(
        p.has("the certificate changed since the last test"),
        "{}",
        p.body
    );
    assert!(p.has(&seen));
    assert!(
        !p.body.contains("value=\"true\" checked"),
        "the pin box is unticked"
    );
}

#[tokio::test]
async fn an_unreachable_controller_is_shown_failed_at_the_test() {
    let c = Console::new().await;
    let mut f = step1();
    f.retain(|(k, _)| *k != "endpoint");
    f.push(("endpoint", "https://bmc.invalid:443"));
    let s2 = c.post("/controllers/new", ADMIN, &f).await;
    let s3 = go(&c, &s2, "2", &[("secret", "lab-redfish")]).await;
    assert_eq!(s3.status, StatusCode::OK, "{}", s3.body);
    assert!(s3.has("Not reachable."), "{}", s3.body);
    assert!(
        s3.has("error sending request for url (https://bmc.invalid"),
        "{}",
        s3.body
    );
    assert!(
        !s3.body.contains("name=\"pin_fingerprint\""),
        "nothing to pin"
    );
}
