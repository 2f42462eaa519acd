//! `plans.NAME.rejoin`: how a failover's old owner comes back as a replica (ADR 0023).
//! `manual` by default; `auto` needs a `rejoin` binding somewhere; anything else is refused
//! with its path and the allowed words.

use qfence_model::config::{Issue, RejoinPolicy, load_str};

const PG_DOCKER: &str = include_str!("../../../examples/pg-docker.yaml");

/// A `db.rejoin` binding at dc1, after its db.standby binding.
const REJOIN_AT_DC1: &str = "\n        - {controller: pg-dc1, capability: db.rejoin, resource: self, \
     role: rejoin, params: {data_dir: /var/lib/postgresql/15/main, primary_conninfo: \
     \"host=127.0.0.1 port=5433 user=replicator passfile=/etc/qfence/pgpass\", \
     rewind_conninfo: \"host=127.0.0.1 port=5433 user=postgres passfile=/etc/qfence/pgpass\"}}\n      dc2:";

fn with(setting: &str, binding: bool) -> String {
    let mut text = PG_DOCKER.replacen("standby: hot", &format!("standby: hot\n    {setting}"), 1);
    if binding {
        text = text.replacen("\n      dc2:", REJOIN_AT_DC1, 1);
    }
    text
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
fn rejoin_is_manual_by_default_and_auto_when_set_with_a_rejoin_binding() {
    let plain = load_str(PG_DOCKER, "pg-docker.yaml").unwrap();
    assert_eq!(
        plain.config.plan("orders-db").unwrap().rejoin,
        RejoinPolicy::Manual
    );
    let auto = load_str(&with("rejoin: auto", true), "pg-docker.yaml").unwrap();
    assert_eq!(
        auto.config.plan("orders-db").unwrap().rejoin,
        RejoinPolicy::Auto
    );
    let manual = load_str(&with("rejoin: manual", false), "pg-docker.yaml").unwrap();
    assert_eq!(
        manual.config.plan("orders-db").unwrap().rejoin,
        RejoinPolicy::Manual
    );
}

#[test]
fn rejoin_auto_without_a_rejoin_binding_and_an_unknown_word_are_refused_with_the_path() {
    let e = errors(&with("rejoin: auto", false));
    assert!(
        has(
            &e,
            "plans.orders-db.rejoin",
            "auto rejoins a failover's old owner through its rejoin bindings (db.rejoin), and no \
             site has one"
        ),
        "{e:?}"
    );
    let e = errors(&with("rejoin: sometimes", true));
    assert!(
        has(
            &e,
            "plans.orders-db.rejoin",
            "unknown rejoin policy \"sometimes\""
        ) && has(&e, "plans.orders-db.rejoin", "manual")
            && has(&e, "plans.orders-db.rejoin", "auto"),
        "{e:?}"
    );
}
