//! `/plans/new` and `/plans/{plan}/edit`.

use axum::http::StatusCode;
use serde_json::json;

use super::*;

/// A small valid plan: a required BMC fence, health and switchover at each site, the VIP.
fn plan_fields(name: &str) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = vec![
        ("name".into(), name.into()),
        ("owner".into(), "dc1".into()),
        ("interval_seconds".into(), "10".into()),
    ];
    for dc in ["dc1", "dc2"] {
        let rows = [
            ("bmc", "power.off", format!("pve-{dc}-01"), "fence", true),
            (
                "pve",
                "vm.status",
                format!("pve-{dc}-01/101"),
                "health",
                false,
            ),
            (
                "pve",
                "vm.start",
                format!("pve-{dc}-01/101"),
                "switchover",
                false,
            ),
        ];
        for (i, (c, cap, res, role, req)) in rows.into_iter().enumerate() {
            let k = |field: &str| format!("b:{dc}:{i}:{field}");
            f.push((k("controller"), format!("{c}-{dc}")));
            f.push((k("capability"), cap.into()));
            f.push((k("resource"), res));
            f.push((k("role"), role.into()));
            if req {
                f.push((k("required"), "true".into()));
            }
        }
    }
    for (k, v) in [
        ("b:service:0:controller", "fgt-edge"),
        ("b:service:0:capability", "vip.own"),
        ("b:service:0:resource", "vip-erp-db"),
        ("b:service:0:role", "service"),
        ("b:service:0:params", "dc1=10.1.1.5, dc2=10.2.1.5"),
    ] {
        f.push((k.into(), v.into()));
    }
    f
}

fn set(f: &mut Vec<(String, String)>, k: &str, v: &str) {
    match f.iter_mut().find(|(n, _)| n == k) {
        Some(e) => e.1 = v.to_owned(),
        None => f.push((k.to_owned(), v.to_owned())),
    }
}

fn refs(f: &[(String, String)]) -> Vec<(&str, &str)> {
    f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test]
async fn only_admins_edit_plans() {
    let c = Console::new().await;
    for t in [VIEWER, OPERATOR] {
        for path in ["/plans/new", "/plans/erp-db/edit"] {
            let p = c.get(path, t).await;
            assert_eq!(p.status, StatusCode::FORBIDDEN, "{path} as {t}");
            assert!(p.has("needs an admin token"), "{}", p.body);
        }
        let p = c.post("/plans/new", t, &refs(&plan_fields("x1"))).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN);
        let p = c
            .post("/plans/erp-db/edit", t, &[("expected_generation", "1")])
            .await;
        assert_eq!(p.status, StatusCode::FORBIDDEN);
    }
    phase("Not signed in: to the sign-in page, then back");
    let req = Request::builder()
        .uri("/plans/new")
        .body(Body::empty())
        .unwrap();
    let p = c.send(req).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), "/login?next=/plans/new");
    assert!(c.plan_names().await.contains(&"erp-db".to_owned()));
    assert_eq!(c.plan_names().await.len(), 1, "nothing was created");
}

#[tokio::test]
async fn admins_find_the_editor_from_the_overview_and_the_plan_page() {
    let c = Console::new().await;
    let p = c.get("/", ADMIN).await;
    assert!(
        p.body.contains("href=\"/plans/new\" id=\"new-plan\""),
        "{}",
        p.body
    );
    let p = c.get("/plans/erp-db", ADMIN).await;
    assert!(
        p.body
            .contains("href=\"/plans/erp-db/edit\" id=\"edit-plan\"")
    );
    for t in [VIEWER, OPERATOR] {
        assert!(!c.get("/", t).await.body.contains("id=\"new-plan\""));
        assert!(
            !c.get("/plans/erp-db", t)
                .await
                .body
                .contains("id=\"edit-plan\"")
        );
    }
}

#[tokio::test]
async fn the_new_plan_form_offers_the_configuration() {
    let c = Console::new().await;
    let p = c.get("/plans/new", ADMIN).await;
    assert_eq!(p.status, StatusCode::OK);
    // Sites that may hold an instance: no witness.
    assert_eq!(p.options_of("owner"), vec!["dc1", "dc2"]);
    assert!(p.body.contains("data-group=\"dc1\""));
    assert!(p.body.contains("data-group=\"service\""));
    assert!(!p.body.contains("data-group=\"witness\""));
    // Every registered controller, and (none picked yet) every capability they have.
    let ctrls = p.options_of("b:dc1:0:controller");
    assert_eq!(
        ctrls,
        vec!["bmc-dc1", "bmc-dc2", "fgt-edge", "pve-dc1", "pve-dc2"]
    );
    let caps = p.options_of("b:dc1:0:capability");
    assert!(caps.contains(&"power.off".to_owned()) && caps.contains(&"vm.stop".to_owned()));
    // An instance offers no service role; the service group offers only it.
    assert!(!p.options_of("b:dc1:0:role").contains(&"service".to_owned()));
    assert_eq!(p.options_of("b:service:0:role"), vec!["service"]);
    // The data the script narrows choices from.
    let start = p.body.find("id=\"editor-data\">").unwrap() + "id=\"editor-data\">".len();
    let end = start + p.body[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&p.body[start..end]).unwrap();
    assert_eq!(data["controllers"]["bmc-dc1"]["type"], "redfish");
    let redfish: Vec<&str> = data["types"]["redfish"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(redfish, vec!["power.off", "power.status"]);
    assert_eq!(data["types"]["redfish"][0]["roles"], json!(["fence"]));
}

#[tokio::test]
async fn a_valid_new_plan_is_created_at_generation_1() {
    let c = Console::new().await;
    let p = c
        .post("/plans/new", ADMIN, &refs(&plan_fields("erp-copy")))
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), "/plans/erp-copy");
    let (generation, spec) = c.plan_spec("erp-copy").await;
    assert_eq!(generation, 1);
    assert_eq!(spec["owner"], "dc1");
    assert_eq!(spec["instances"]["dc2"][0]["required"], true);
    assert_eq!(
        spec["service"][0]["params"],
        json!({"dc1": "10.1.1.5", "dc2": "10.2.1.5"})
    );
}

#[tokio::test]
async fn a_bad_capability_is_refused_next_to_its_field_and_everything_typed_is_kept() {
    let c = Console::new().await;
    let mut f = plan_fields("erp-new");
    // A capability of another type, and a timing relation broken.
    set(&mut f, "b:dc2:0:capability", "vm.stop");
    set(&mut f, "fence_timeout_seconds", "90");
    set(&mut f, "b:dc1:1:resource", "pve-dc1-01/101 typed");
    let p = c.post("/plans/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", p.body);
    let at_cap = p.errors_at("b:dc2:0:capability");
    assert_eq!(at_cap.len(), 1, "{}", p.body);
    assert!(
        at_cap[0].contains("\"vm.stop\" is not a capability of controller \"bmc-dc2\" (redfish)"),
        "{at_cap:?}"
    );
    let at_timeout = p.errors_at("fence_timeout_seconds");
    assert!(
        at_timeout.iter().any(|m| m.contains("(90)")),
        "{at_timeout:?}"
    );
    phase("Everything typed is still in the form");
    assert_eq!(p.value_of("name").as_deref(), Some("erp-new"));
    assert_eq!(p.value_of("fence_timeout_seconds").as_deref(), Some("90"));
    assert_eq!(p.value_of("b:dc2:0:capability").as_deref(), Some("vm.stop"));
    assert_eq!(
        p.value_of("b:dc1:1:resource").as_deref(),
        Some("pve-dc1-01/101 typed")
    );
    assert_eq!(
        p.value_of("b:service:0:params").as_deref(),
        Some("dc1=10.1.1.5, dc2=10.2.1.5")
    );
    assert!(p.body.contains("aria-invalid=\"true\""));
    assert!(p.has("nothing was saved"));
    assert!(!c.plan_names().await.contains(&"erp-new".to_owned()));
}

#[tokio::test]
async fn a_bad_name_params_and_a_missing_resource_are_each_shown_at_once() {
    let c = Console::new().await;
    let mut f = plan_fields("bad name!");
    set(&mut f, "b:service:0:params", "dc1 10.1.1.5");
    set(&mut f, "b:dc1:2:resource", "");
    let p = c.post("/plans/new", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        p.errors_at("name")[0].contains("is not a plan name"),
        "{}",
        p.body
    );
    assert!(p.errors_at("b:service:0:params")[0].contains("key=value"));
    assert!(
        !p.errors_at("b:dc1:2:resource").is_empty(),
        "the missing resource is named at its field: {}",
        p.body
    );
    assert_eq!(p.value_of("name").as_deref(), Some("bad name!"));
}

#[tokio::test]
async fn a_taken_name_is_refused_next_to_the_name() {
    let c = Console::new().await;
    let p = c
        .post("/plans/new", ADMIN, &refs(&plan_fields("erp-db")))
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT);
    assert!(
        p.errors_at("name")[0].contains("already exists"),
        "{}",
        p.body
    );
    assert_eq!(c.plan_spec("erp-db").await.0, 1);
}

#[tokio::test]
async fn without_the_script_refreshing_narrows_the_choices() {
    let c = Console::new().await;
    let p = c
        .post(
            "/plans/new",
            ADMIN,
            &[
                ("b:dc1:0:controller", "bmc-dc1"),
                ("b:dc1:1:controller", "pve-dc1"),
                ("b:dc1:1:capability", "replication.lag"),
                ("action", "refresh"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::OK);
    assert_eq!(
        p.options_of("b:dc1:0:capability"),
        vec!["power.off", "power.status"]
    );
    assert_eq!(p.options_of("b:dc1:1:role"), vec!["readiness"]);
    assert!(p.has("max_age_seconds"), "the params hint names them");
    phase("Add and remove rows without the script");
    let p = c
        .post(
            "/plans/new",
            ADMIN,
            &[
                ("b:dc1:0:controller", "bmc-dc1"),
                ("b:dc1:1:controller", "pve-dc1"),
                ("action", "remove:dc1:0"),
            ],
        )
        .await;
    assert_eq!(p.value_of("b:dc1:0:controller").as_deref(), Some("pve-dc1"));
    let p = c.post("/plans/new", ADMIN, &[("action", "add:dc2")]).await;
    assert!(p.body.contains("name=\"b:dc2:1:controller\""));
    assert!(!p.body.contains("name=\"b:dc1:1:controller\""));
    assert!(c.plan_names().await.len() == 1, "nothing was created");
}

#[tokio::test]
async fn the_edit_form_shows_the_plan_in_force() {
    let c = Console::new().await;
    let p = c.get("/plans/erp-db/edit", ADMIN).await;
    assert_eq!(p.status, StatusCode::OK);
    assert_eq!(p.value_of("expected_generation").as_deref(), Some("1"));
    assert_eq!(p.value_of("owner").as_deref(), Some("dc1"));
    assert_eq!(p.value_of("b:dc1:0:controller").as_deref(), Some("bmc-dc1"));
    assert_eq!(
        p.value_of("b:dc1:0:capability").as_deref(),
        Some("power.off")
    );
    assert_eq!(
        p.value_of("b:dc1:1:resource").as_deref(),
        Some("pve-dc1-01/101")
    );
    assert_eq!(
        p.value_of("b:service:0:params").as_deref(),
        Some("dc1=10.1.1.5, dc2=10.2.1.5")
    );
    // Only bmc-dc1's capabilities, only power.off's roles.
    assert_eq!(
        p.options_of("b:dc1:0:capability"),
        vec!["power.off", "power.status"]
    );
    assert_eq!(p.options_of("b:dc1:0:role"), vec!["fence"]);
    let p = c.get("/plans/nope/edit", ADMIN).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
}

/// The edit form's fields as the browser would send them back.
async fn edit_fields(c: &Console) -> Vec<(String, String)> {
    let p = c.get("/plans/erp-db/edit", ADMIN).await;
    let mut f = vec![("expected_generation".to_owned(), "1".to_owned())];
    for k in ["owner", "interval_seconds"] {
        f.push((k.into(), p.value_of(k).unwrap_or_default()));
    }
    for g in ["dc1", "dc2", "service"] {
        for i in 0..5 {
            for field in ["controller", "capability", "resource", "role", "params"] {
                let k = format!("b:{g}:{i}:{field}");
                if let Some(v) = p.value_of(&k) {
                    f.push((k, v));
                }
            }
        }
    }
    f.push(("b:dc1:0:required".into(), "true".into()));
    f.push(("b:dc2:0:required".into(), "true".into()));
    f
}

#[tokio::test]
async fn an_edit_is_staged_and_applied_on_the_expected_generation() {
    let c = Console::new().await;
    let mut f = edit_fields(&c).await;
    set(&mut f, "interval_seconds", "5");
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), "/plans/erp-db");
    let (generation, spec) = c.plan_spec("erp-db").await;
    assert_eq!(generation, 2);
    assert_eq!(spec["interval_seconds"], 5);
    assert_eq!(spec["instances"]["dc1"][0]["required"], true);
}

#[tokio::test]
async fn stage_only_leaves_the_generation() {
    let c = Console::new().await;
    let mut f = edit_fields(&c).await;
    set(&mut f, "interval_seconds", "7");
    set(&mut f, "action", "stage");
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let (generation, _) = c.plan_spec("erp-db").await;
    assert_eq!(generation, 1);
    let p = c.get("/plans/erp-db/edit", ADMIN).await;
    assert!(p.has("alice staged a change on generation 1"), "{}", p.body);
    let p = c.get("/plans/erp-db/edit?staged=1", ADMIN).await;
    assert_eq!(p.value_of("interval_seconds").as_deref(), Some("7"));
}

#[tokio::test]
async fn a_stale_edit_shows_the_current_generation_and_keeps_the_text() {
    let c = Console::new().await;
    let mine = {
        let mut f = edit_fields(&c).await;
        set(&mut f, "interval_seconds", "4");
        f
    };
    phase("Someone else applies a change first");
    let mut theirs = edit_fields(&c).await;
    set(&mut theirs, "interval_seconds", "8");
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&theirs)).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    phase("Mine, on generation 1, is refused as stale");
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&mine)).await;
    assert_eq!(p.status, StatusCode::CONFLICT, "{}", p.body);
    assert!(
        p.has("it is at generation 2, your edit started from generation 1"),
        "{}",
        p.body
    );
    assert_eq!(p.value_of("interval_seconds").as_deref(), Some("4"));
    assert_eq!(p.value_of("override_generation").as_deref(), Some("2"));
    let (generation, spec) = c.plan_spec("erp-db").await;
    assert_eq!(
        (generation, spec["interval_seconds"].clone()),
        (2, json!(8))
    );
    assert!(
        c.staged("erp-db").await.is_none(),
        "a stale edit stages nothing"
    );
    phase("Applying mine over generation 2, deliberately");
    let mut over = mine.clone();
    over.push(("override_generation".into(), "2".into()));
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&over)).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let (generation, spec) = c.plan_spec("erp-db").await;
    assert_eq!(
        (generation, spec["interval_seconds"].clone()),
        (3, json!(4))
    );
}

#[tokio::test]
async fn an_invalid_edit_changes_nothing() {
    let c = Console::new().await;
    let mut f = edit_fields(&c).await;
    set(&mut f, "owner", "dc9");
    set(&mut f, "b:dc1:0:role", "health");
    let p = c.post("/plans/erp-db/edit", ADMIN, &refs(&f)).await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!p.errors_at("owner").is_empty(), "{}", p.body);
    assert!(
        p.errors_at("b:dc1:0:role")
            .iter()
            .any(|m| m.contains("power.off")),
        "{:?}",
        p.errors_at("b:dc1:0:role")
    );
    assert_eq!(p.value_of("owner").as_deref(), Some("dc9"));
    assert_eq!(c.plan_spec("erp-db").await.0, 1);
    assert!(c.staged("erp-db").await.is_none());
}

#[tokio::test]
async fn a_form_from_another_site_is_refused() {
    let c = Console::new().await;
    let p = c
        .post_from(
            "/plans/new",
            ADMIN,
            &refs(&plan_fields("evil")),
            "https://evil.example",
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(!c.plan_names().await.contains(&"evil".to_owned()));
}

#[tokio::test]
async fn the_script_and_stylesheet_are_served() {
    let c = Console::new().await;
    let req = Request::builder()
        .uri("/console-forms.js")
        .body(Body::empty())
        .unwrap();
    let p = c.send(req).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("editor-data"));
    let req = Request::builder()
        .uri("/console-forms.css")
        .body(Body::empty())
        .unwrap();
    assert_eq!(c.send(req).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_resource_field_offers_what_the_controller_discovered() {
    let c = Console::new().await;
    let p = c.get("/plans/erp-db/edit", ADMIN).await;
    // Row 1 of dc1 is pve-dc1 vm.stop: its datalist holds what pve-dc1 listed for vm.stop.
    let dl = &p.body[p.body.find("<datalist id=\"dl-b:dc1:1\">").unwrap()..];
    let dl = &dl[..dl.find("</datalist>").unwrap()];
    assert!(dl.contains("<option value=\"pve-dc1-01/101\">"), "{dl}");
    assert!(!dl.contains("pve-dc1-vm-status-1"), "only vm.stop's: {dl}");
    // The script gets every controller's list.
    let start = p.body.find("id=\"editor-data\">").unwrap() + "id=\"editor-data\">".len();
    let end = start + p.body[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&p.body[start..end]).unwrap();
    let found = data["discovered"]["bmc-dc1"].as_array().unwrap();
    assert!(
        found
            .iter()
            .any(|d| d["capability"] == "power.off" && d["resource"] == "pve-dc1-01"),
        "{found:?}"
    );
}

#[tokio::test]
async fn the_json_view_fills_the_form_or_says_why_not() {
    let c = Console::new().await;
    let spec = qfence_server::testing::erp_db_spec();
    let text = serde_json::to_string(&spec).unwrap();
    phase("Valid JSON fills the form; nothing is saved");
    let p = c
        .post(
            "/plans/new",
            ADMIN,
            &[
                ("name", "from-json"),
                ("raw", &text),
                ("action", "load_raw"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert_eq!(p.value_of("name").as_deref(), Some("from-json"));
    assert_eq!(p.value_of("b:dc2:0:controller").as_deref(), Some("bmc-dc2"));
    assert_eq!(
        p.value_of("b:service:0:params").as_deref(),
        Some("dc1=10.1.1.5, dc2=10.2.1.5")
    );
    assert!(!c.plan_names().await.contains(&"from-json".to_owned()));

    phase("Broken JSON is kept, with the reason at the text view");
    let broken = r#"{"owner": "dc1","#;
    let p = c
        .post(
            "/plans/new",
            ADMIN,
            &[("owner", "dc2"), ("raw", broken), ("action", "load_raw")],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        p.errors_at("raw")[0].contains("not valid JSON"),
        "{}",
        p.body
    );
    assert!(p.has(&format!(">{broken}</textarea>")), "the text is kept");
    assert_eq!(
        p.value_of("owner").as_deref(),
        Some("dc2"),
        "the form as it was"
    );

    phase("A key the form has no place for is refused, not dropped");
    let odd =
        r#"{"owner": "dc1", "colour": "red", "service": [{"controller": "fgt-edge", "vip": 1}]}"#;
    let p = c
        .post("/plans/new", ADMIN, &[("raw", odd), ("action", "load_raw")])
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    let m = &p.errors_at("raw")[0];
    assert!(
        m.contains("\"colour\"") && m.contains("service[0].vip"),
        "{m}"
    );
}
