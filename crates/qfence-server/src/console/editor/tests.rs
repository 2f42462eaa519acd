use qfence_model::config::keys;
use serde_json::json;

use super::form::*;
use super::*;

#[test]
fn every_plan_key_has_a_place_in_the_form() {
    let rows: Vec<&str> = TIMINGS.iter().chain(SWITCHES).map(|(k, _, _)| *k).collect();
    for k in &rows {
        assert!(keys::PLAN.contains(k), "{k} is not a plan key");
    }
    for k in keys::PLAN {
        let placed = rows.contains(k) || ["owner", "priority", "instances", SERVICE].contains(k);
        assert!(placed, "the form has no place for {k}");
    }
}

#[test]
fn issue_paths_name_fields() {
    let f = |p: &str| field_of(p, "erp-db");
    assert_eq!(
        f("plans.erp-db.instances.dc1[2].capability").as_deref(),
        Some("b:dc1:2:capability")
    );
    assert_eq!(
        f("plans.erp-db.instances.dc1[0].params.max_age_seconds").as_deref(),
        Some("b:dc1:0:params")
    );
    assert_eq!(
        f("plans.erp-db.instances.dc1[3]").as_deref(),
        Some("b:dc1:3")
    );
    assert_eq!(
        f("plans.erp-db.instances.dc2").as_deref(),
        Some("group:dc2")
    );
    assert_eq!(f("plans.erp-db.instances").as_deref(), Some("instances"));
    assert_eq!(
        f("plans.erp-db.service[0].role").as_deref(),
        Some("b:service:0:role")
    );
    assert_eq!(
        f("plans.erp-db.fence_timeout_seconds").as_deref(),
        Some("fence_timeout_seconds")
    );
    assert_eq!(f("plans.erp-db.priority[1]").as_deref(), Some("priority"));
    assert_eq!(f("plans.erp-db.owner").as_deref(), Some("owner"));
    assert_eq!(f("plans.erp-db"), None);
    assert_eq!(f("plans.erp-dbx.owner"), None);
    assert_eq!(f("controllers.bmc-dc1.site"), None);
}

#[test]
fn the_lab_plan_survives_the_form() {
    let spec = crate::testing::erp_db_spec();
    let sites = vec!["dc1".to_owned(), "dc2".to_owned()];
    let form = PlanForm::from_spec("erp-db", &spec, &sites);
    let (back, issues) = form.to_spec();
    assert!(issues.is_empty());
    assert_eq!(back, spec);
}

#[test]
fn posted_rows_are_compacted_in_order_and_blank_ones_dropped() {
    let fields: Vec<(String, String)> = [
        ("owner", "dc1"),
        ("b:dc1:5:controller", "pve-dc1"),
        ("b:dc1:5:capability", "vm.stop"),
        ("b:dc1:1:controller", "bmc-dc1"),
        ("b:dc1:2:controller", ""),
        ("b:service:0:role", ""),
        ("action", "save"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let (f, a) = PlanForm::from_fields(&fields, &["dc1".into(), "dc2".into()]);
    assert_eq!(a, Action::Save);
    let dc1 = &f.groups[0];
    assert_eq!(dc1.name, "dc1");
    assert_eq!(dc1.rows.len(), 2);
    assert_eq!(dc1.rows[0].controller, "bmc-dc1");
    assert_eq!(dc1.rows[0].key, "b:dc1:0");
    assert_eq!(dc1.rows[1].capability, "vm.stop");
    assert_eq!(f.groups.last().unwrap().name, "service");
    assert!(f.groups.last().unwrap().rows.is_empty());
}

#[test]
fn a_spec_the_form_cannot_hold_is_named() {
    let spec = json!({"owner": "dc1", "sites": ["dc1"], "instances": {"dc1": [
        {"controller": "bmc-dc1", "capability": "power.off", "resource": "h", "role": "fence",
         "timeout": 3}]}});
    let found = unplaceable(spec.as_object().unwrap());
    assert_eq!(found, vec!["\"sites\"", "instances.dc1[0].timeout"]);
    let lab = crate::testing::erp_db_spec();
    assert!(unplaceable(lab.as_object().unwrap()).is_empty());
}

#[test]
fn params_must_be_pairs() {
    assert_eq!(
        parse_params("dc1=10.1.1.5, dc2 = 10.2.1.5").unwrap().len(),
        2
    );
    assert!(parse_params("max_age_seconds 120").is_err());
    assert!(parse_params("").unwrap().is_empty());
}

#[test]
fn embedded_json_cannot_close_its_script() {
    let s = script_json(&json!({"x": "</script><b>"}));
    assert!(!s.contains('<'));
    assert_eq!(
        serde_json::from_str::<Value>(&s).unwrap(),
        json!({"x": "</script><b>"})
    );
}
