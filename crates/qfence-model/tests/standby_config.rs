//! `plans.NAME.standby`: cold by default; hot needs a `db.standby` binding at every site,
//! with the owner's address for every plan site; cold takes none.

use qfence_model::config::{Issue, StandbyPosture, load_str};

const PG_DOCKER: &str = include_str!("../../../examples/pg-docker.yaml");

/// The example with its hot standby setting and db.standby bindings taken out.
fn cold_example() -> String {
    PG_DOCKER
        .lines()
        .filter(|l| !l.contains("standby: hot") && !l.contains("db.standby"))
        .filter(|l| !l.contains("params: {dc1: \"127.0.0.1:5432\""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn errors(text: &str) -> Vec<Issue> {
    match load_str(text, "pg-docker.yaml") {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

fn has(issues: &[Issue], path: &str, words: &str) -> bool {
    issues
        .iter()
        .any(|i| i.path == path && i.to_string().contains(words))
}

#[test]
fn the_example_is_hot_and_a_plan_without_the_key_is_cold() {
    let hot = load_str(PG_DOCKER, "pg-docker.yaml").unwrap();
    assert_eq!(
        hot.config.plan("orders-db").unwrap().standby,
        StandbyPosture::Hot
    );
    assert_eq!(
        hot.config.plan("web").unwrap().standby,
        StandbyPosture::Cold
    );
    let cold = load_str(&cold_example(), "pg-docker.yaml").unwrap();
    assert_eq!(
        cold.config.plan("orders-db").unwrap().standby,
        StandbyPosture::Cold
    );
}

#[test]
fn a_hot_plan_needs_a_standby_binding_at_every_site() {
    let text = cold_example().replacen(
        "failover_after_definitive: 2",
        "failover_after_definitive: 2\n    standby: hot",
        1,
    );
    let e = errors(&text);
    for site in ["dc1", "dc2"] {
        assert!(
            has(
                &e,
                &format!("plans.orders-db.instances.{site}"),
                "standby: hot needs a standby binding at every site"
            ),
            "{e:?}"
        );
    }
}

#[test]
fn a_cold_plan_takes_no_standby_binding_and_the_posture_is_a_word() {
    let text = PG_DOCKER.replacen("standby: hot", "standby: cold", 1);
    let e = errors(&text);
    assert!(
        has(
            &e,
            "plans.orders-db.standby",
            "only a plan with standby: hot reads"
        ),
        "{e:?}"
    );
    let e = errors(&PG_DOCKER.replacen("standby: hot", "standby: warm", 1));
    assert!(has(&e, "plans.orders-db.standby", "warm"), "{e:?}");
}

#[test]
fn db_standby_needs_the_owner_address_of_every_plan_site() {
    let text = PG_DOCKER.replacen(
        "params: {dc1: \"127.0.0.1:5432\", dc2: \"127.0.0.1:5433\"}",
        "params: {dc1: \"127.0.0.1:5432\", dc3: \"127.0.0.1:5433\"}",
        1,
    );
    let e = errors(&text);
    assert!(e.iter().any(|i| i.path.ends_with(".params.dc3")), "{e:?}");
    assert!(
        e.iter()
            .any(|i| i.path.ends_with(".params") && i.to_string().contains("missing: dc2")),
        "{e:?}"
    );
}
