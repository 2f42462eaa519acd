//! No input panics the parser or the validator: random text, random YAML made of
//! configuration words, and the lab example with its lines shuffled, dropped and repeated.
//! Case counts are fixed so the run is bounded (a few seconds).

use proptest::prelude::*;
use qfence_model::config::{keys, load_str};
use qfence_model::{ControllerType, Role};

const LAB: &str = include_str!("../../../examples/lab.yaml");

/// Words a configuration uses, so random documents reach deep into the decoder: every key
/// the model defines, the type and role names, and a few values and credential keys.
fn words() -> Vec<&'static str> {
    let mut w = keys::all();
    w.extend(ControllerType::ALL.map(ControllerType::as_str));
    w.extend(Role::ALL.map(Role::as_str));
    w.extend([
        "dc1",
        "dc2",
        "power.off",
        "vm.stop",
        "vip.own",
        "health",
        "password",
        "https://x:1",
        "127.0.0.1:7401",
        "pve-dc1-01/101",
        "101-1",
        "sha256:00",
        "max_lag_bytes",
    ]);
    w
}

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(words()).prop_map(str::to_owned),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| format!("{f}")),
        Just("true".to_owned()),
        Just("~".to_owned()),
        Just("''".to_owned()),
        "[a-z0-9 :._/-]{0,12}".prop_map(|s| format!("{s:?}")),
    ]
}

/// A YAML document in flow style, made of configuration words.
fn document() -> impl Strategy<Value = String> {
    let leaf = scalar();
    let tree = leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((prop::sample::select(words()), inner), 0..7).prop_map(|v| {
                let entries: Vec<String> =
                    v.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", entries.join(", "))
            }),
        ]
    });
    prop::collection::vec((prop::sample::select(words()), tree), 0..6).prop_map(|v| {
        v.into_iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect::<String>()
    })
}

#[derive(Debug, Clone)]
enum Edit {
    Drop(usize),
    Repeat(usize),
    Swap(usize, usize),
    Replace(usize, String),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let n = LAB.lines().count();
    prop::collection::vec(
        prop_oneof![
            (0..n).prop_map(Edit::Drop),
            (0..n).prop_map(Edit::Repeat),
            (0..n, 0..n).prop_map(|(a, b)| Edit::Swap(a, b)),
            (0..n, prop::sample::select(words())).prop_map(|(i, w)| Edit::Replace(i, w.to_owned())),
        ],
        1..8,
    )
}

fn apply(edits: &[Edit]) -> String {
    let mut lines: Vec<String> = LAB.lines().map(str::to_owned).collect();
    for e in edits {
        let n = lines.len();
        if n == 0 {
            break;
        }
        match e {
            Edit::Drop(i) => {
                lines.remove(i % n);
            }
            Edit::Repeat(i) => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            Edit::Swap(a, b) => lines.swap(a % n, b % n),
            Edit::Replace(i, w) => {
                // Replace the line's last word, keeping its indentation and key.
                let l = &mut lines[i % n];
                if let Some(pos) = l.rfind([' ', ':']) {
                    l.truncate(pos + 1);
                    l.push_str(w);
                }
            }
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        let _ = load_str(&text, "fuzz.yaml");
    }

    #[test]
    fn random_configuration_shaped_yaml_never_panics(text in document()) {
        if let Err(issues) = load_str(&text, "fuzz.yaml") {
            prop_assert!(!issues.is_empty());
            prop_assert!(issues.iter().any(|i| i.is_error()));
        }
    }

    #[test]
    fn a_damaged_lab_never_panics_and_every_error_has_a_line(edits in edits()) {
        let text = apply(&edits);
        if let Ok(loaded) = load_str(&text, "lab.yaml") {
            // What a ValidatedConfig promises holds for whatever got through.
            check_invariants(&loaded.config);
        }
        if let Err(issues) = load_str(&text, "lab.yaml") {
            prop_assert!(issues.iter().any(|i| i.is_error()));
            // A damaged file must never be accepted silently: errors carry where they are.
            for i in &issues {
                prop_assert!(i.line.is_some() || i.path.is_empty(), "{i:?}");
            }
        }
    }
}

/// The guarantees a `ValidatedConfig` gives its holders.
fn check_invariants(v: &qfence_model::config::ValidatedConfig) {
    let c = v.config();
    for (id, ctl) in &c.controllers {
        assert!(
            c.orchestrators.values().any(|o| ctl.callable_from(&o.site)),
            "{id} has no caller"
        );
        assert!(!c.sites[&ctl.site].witness, "{id} at a witness site");
    }
    for (pid, plan) in v.plans() {
        assert!(plan.instances.len() >= 2, "{pid} has fewer than two sites");
        assert!(plan.instances.contains_key(&plan.owner), "{pid} owner");
        for (site, bindings) in &plan.instances {
            assert!(!c.sites[site].witness);
            for b in bindings {
                let spec = v.capability(b);
                assert!(spec.allows(b.role));
                assert!(spec.resource.accepts(&b.resource));
                assert!(b.role != qfence_model::Role::Service);
                assert!(!b.required || b.role == qfence_model::Role::Fence);
            }
        }
        for b in &plan.service {
            assert_eq!(b.role, qfence_model::Role::Service);
            assert!(v.capability(b).allows(b.role));
        }
        assert!(plan.fence_timeout < plan.failover_after);
        assert!(plan.freshness >= plan.interval);
    }
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let text = format!("cluster: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let issues = load_str(&text, "deep.yaml").unwrap_err();
    assert!(issues[0].message.contains("not valid YAML"), "{issues:?}");
}
