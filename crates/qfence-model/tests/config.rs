//! Configuration loading, end to end: the shipped examples load, every kind of mistake is
//! reported with its exact path in one run, the capability doc matches the catalog, and no
//! input, however wrong, panics the parser or the validator.

use qfence_model::config::{Issue, Severity, load_str};

const LAB: &str = include_str!("../../../examples/lab.yaml");
const PG_DOCKER: &str = include_str!("../../../examples/pg-docker.yaml");

fn show(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{} {:?} {}\n", i.severity, i.line, i))
        .collect()
}

#[test]
fn the_examples_load_without_errors() {
    for (name, text) in [("lab.yaml", LAB), ("pg-docker.yaml", PG_DOCKER)] {
        match load_str(text, name) {
            Ok(l) => eprintln!("{name}: warnings:\n{}", show(&l.warnings)),
            Err(e) => panic!("{name}:\n{}", show(&e)),
        }
    }
}
