//! Validating one plan or one controller sent through the HTTP API, with exactly the
//! validation the configuration file gets.
//!
//! The API receives a plan as the same structure the file has under `plans.NAME` (JSON being
//! a subset of YAML's data model). Rather than a second validator that could drift from the
//! file's, the entry is put into the current configuration's tree in place of the section it
//! belongs to, the tree is written back out as YAML flow text, and the whole document goes
//! through [`load_str`]. Issues therefore carry the same paths and messages as `qfence config
//! check` (`plans.erp-db.instances.dc1[0].capability: ...`); they carry no line, since the
//! lines of the rebuilt text mean nothing to the sender.
//!
//! Other plans are left out of the document: a plan is checked only against the sites,
//! orchestrators and controllers (validation has no cross-plan rule), and the other plans'
//! warnings are not the sender's concern.

use super::issue::{Issue, Severity};
use super::load::load_str;
use super::tree::{self, Node, Value};
use super::{ControllerConfig, PlanConfig};

/// What validation accepted, with the warnings it came with.
#[derive(Debug, Clone)]
pub struct Checked<T> {
    /// The validated entry.
    pub value: T,
    /// Warnings about the entry, sorted by path, without lines.
    pub warnings: Vec<Issue>,
}

/// Validates `spec` as the plan `name` against the configuration `config_text` (YAML).
///
/// On failure, every issue about the plan, sorted by path. An invalid `config_text` is
/// reported too (as issues under its own paths): the caller's base configuration must load.
pub fn check_plan(
    config_text: &str,
    name: &str,
    spec: &serde_json::Value,
) -> Result<Checked<PlanConfig>, Vec<Issue>> {
    let text = with_entry(config_text, "plans", name, spec, true)?;
    let prefix = format!("plans.{name}");
    let loaded = load_str(&text, "the configuration").map_err(|issues| strip(issues, &prefix))?;
    let plan = loaded
        .config
        .config()
        .plans
        .iter()
        .find(|(id, _)| id.as_str() == name)
        .map(|(_, p)| p.clone());
    match plan {
        Some(value) => Ok(Checked {
            value,
            warnings: strip(loaded.warnings, &prefix),
        }),
        None => Err(vec![missing(&prefix)]),
    }
}

/// Validates `spec` as the controller `name` (a new one, or a replacement) against the
/// configuration `config_text`. Plans are left out: a new controller is bound by no plan yet.
pub fn check_controller(
    config_text: &str,
    name: &str,
    spec: &serde_json::Value,
) -> Result<Checked<ControllerConfig>, Vec<Issue>> {
    let text = with_entry(config_text, "controllers", name, spec, true)?;
    let prefix = format!("controllers.{name}");
    let loaded = load_str(&text, "the configuration").map_err(|issues| strip(issues, &prefix))?;
    let controller = loaded
        .config
        .config()
        .controllers
        .iter()
        .find(|(id, _)| id.as_str() == name)
        .map(|(_, c)| c.clone());
    match controller {
        Some(value) => Ok(Checked {
            value,
            warnings: strip(loaded.warnings, &prefix),
        }),
        None => Err(vec![missing(&prefix)]),
    }
}

/// The configuration text with `section.name` set to `spec` (added or replaced), written as
/// YAML flow text that [`load_str`] reads back to the same tree. With `drop_plans`, the
/// `plans` section is emptied first (but for the entry being set). Use it to keep a base
/// configuration that includes controllers registered through the API.
pub fn with_entry(
    config_text: &str,
    section: &str,
    name: &str,
    spec: &serde_json::Value,
    drop_plans: bool,
) -> Result<String, Vec<Issue>> {
    with_entries(config_text, &[(section, name, spec)], drop_plans)
}

/// [`with_entry`] for many entries at once (`(section, name, spec)`, set in order): the text
/// is parsed and written once, however many there are.
pub fn with_entries(
    config_text: &str,
    new: &[(&str, &str, &serde_json::Value)],
    drop_plans: bool,
) -> Result<String, Vec<Issue>> {
    let mut root = tree::parse(config_text).map_err(|e| {
        vec![Issue {
            path: String::new(),
            message: format!("the base configuration is not valid YAML: {}", e.message),
            severity: Severity::Error,
            line: None,
        }]
    })?;
    if root.value == Value::Null {
        root.value = Value::Map(Vec::new());
    }
    let Value::Map(entries) = &mut root.value else {
        return Err(vec![Issue {
            path: String::new(),
            message: "the base configuration is not a mapping".to_owned(),
            severity: Severity::Error,
            line: None,
        }]);
    };
    if drop_plans {
        entries.retain(|(k, _)| k.value != Value::Str("plans".to_owned()));
    }
    for (section, name, spec) in new {
        let key = Value::Str((*section).to_owned());
        let pos = match entries.iter().position(|(k, _)| k.value == key) {
            Some(i) => i,
            None => {
                entries.push((bare(key), bare(Value::Map(Vec::new()))));
                entries.len() - 1
            }
        };
        let sect = &mut entries[pos].1;
        if sect.value == Value::Null {
            sect.value = Value::Map(Vec::new());
        }
        let Value::Map(items) = &mut sect.value else {
            return Err(vec![Issue {
                path: (*section).to_owned(),
                message: format!("the base configuration's {section} is not a mapping"),
                severity: Severity::Error,
                line: None,
            }]);
        };
        let name_key = Value::Str((*name).to_owned());
        items.retain(|(k, _)| k.value != name_key);
        items.push((bare(name_key), from_json(spec)));
    }
    let mut out = String::new();
    emit(&root, &mut out);
    Ok(out)
}

fn missing(path: &str) -> Issue {
    Issue {
        path: path.to_owned(),
        message: "the entry was not decoded".to_owned(),
        severity: Severity::Error,
        line: None,
    }
}

/// Drops lines (they refer to the rebuilt text) and the warnings about anything but the
/// entry at `prefix` (the base configuration's own warnings are not the sender's concern).
/// Errors are kept wherever they are.
fn strip(issues: Vec<Issue>, prefix: &str) -> Vec<Issue> {
    issues
        .into_iter()
        .filter(|i| {
            i.is_error() || {
                let p = prefix;
                i.path == p
                    || i.path.starts_with(&format!("{p}."))
                    || i.path.starts_with(&format!("{p}["))
            }
        })
        .map(|mut i| {
            i.line = None;
            i
        })
        .collect()
}

fn bare(value: Value) -> Node {
    Node { value, line: 0 }
}

fn from_json(v: &serde_json::Value) -> Node {
    use serde_json::Value as J;
    bare(match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::Int(i.into()),
            (_, Some(u), _) => Value::Int(u.into()),
            (_, _, Some(f)) => Value::Float(f),
            _ => Value::Null,
        },
        J::String(s) => Value::Str(s.clone()),
        J::Array(a) => Value::Seq(a.iter().map(from_json).collect()),
        J::Object(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (bare(Value::Str(k.clone())), from_json(v)))
                .collect(),
        ),
    })
}

/// Writes a node as YAML flow text. Strings are double-quoted with JSON escapes, which YAML's
/// double-quoted style reads the same way; duplicate keys are kept, so the loader still
/// reports them.
fn emit(node: &Node, out: &mut String) {
    match &node.value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) if f.is_nan() => out.push_str(".nan"),
        Value::Float(f) if f.is_infinite() => out.push_str(if *f > 0.0 { ".inf" } else { "-.inf" }),
        Value::Float(f) => {
            let s = format!("{f:?}");
            out.push_str(&s);
        }
        Value::Str(s) => out.push_str(&serde_json::to_string(s).expect("a string serialises")),
        Value::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit(item, out);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit(k, out);
                out.push_str(": ");
                emit(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASE: &str = include_str!("../../../../examples/lab.yaml");

    #[test]
    fn the_rebuilt_text_loads_to_the_same_configuration() {
        let original = load_str(BASE, "lab").expect("the example loads");
        let (name, plan) = original.config.plans().next().expect("a plan");
        // Round trip through the flow text with one plan kept as is.
        let root = tree::parse(BASE).unwrap();
        let mut text = String::new();
        emit(&root, &mut text);
        let again = load_str(&text, "rebuilt").expect("the rebuilt text loads");
        assert_eq!(again.config, original.config);
        assert!(again.config.plan(name.as_str()) == Some(plan));
    }

    #[test]
    fn a_valid_plan_is_accepted_and_a_broken_one_reports_paths_of_the_file() {
        let original = load_str(BASE, "lab").unwrap();
        let (name, _) = original.config.plans().next().unwrap();
        let root = tree::parse(BASE).unwrap();
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        let plans = &entries
            .iter()
            .find(|(k, _)| k.value == Value::Str("plans".into()))
            .unwrap()
            .1;
        let Value::Map(items) = &plans.value else {
            panic!()
        };
        let spec = to_json(&items[0].1);
        let checked = check_plan(BASE, "copy", &spec).expect("the same plan under a new name");
        assert_eq!(&checked.value, original.config.plan(name.as_str()).unwrap());

        let mut broken = spec.clone();
        broken["interval_seconds"] = json!("often");
        broken["colour"] = json!("red");
        let issues = check_plan(BASE, "copy", &broken).unwrap_err();
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(paths.contains(&"plans.copy.interval_seconds"), "{issues:?}");
        assert!(paths.contains(&"plans.copy.colour"), "{issues:?}");
        assert!(issues.iter().all(|i| i.line.is_none()));
    }

    #[test]
    fn a_plan_name_that_is_not_a_name_is_refused() {
        let issues = check_plan(BASE, "Not A Name", &json!({})).unwrap_err();
        assert!(
            issues.iter().any(|i| i.path.starts_with("plans")),
            "{issues:?}"
        );
    }

    #[test]
    fn strings_with_quotes_and_control_characters_survive_the_flow_text() {
        let spec = json!({"weird": "a\"b\\c\n\u{1}é"});
        let text = with_entry("{}", "plans", "p", &spec, true).unwrap();
        let root = tree::parse(&text).unwrap();
        let Value::Map(e) = &root.value else { panic!() };
        let Value::Map(p) = &e[0].1.value else {
            panic!()
        };
        let Value::Map(f) = &p[0].1.value else {
            panic!()
        };
        assert_eq!(f[0].1.value, Value::Str("a\"b\\c\n\u{1}é".into()));
    }

    fn to_json(n: &Node) -> serde_json::Value {
        match &n.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => json!(b),
            Value::Int(i) => json!(*i as i64),
            Value::Float(f) => json!(f),
            Value::Str(s) => json!(s),
            Value::Seq(v) => serde_json::Value::Array(v.iter().map(to_json).collect()),
            Value::Map(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.value.as_text().unwrap(), to_json(v)))
                    .collect(),
            ),
        }
    }
}
