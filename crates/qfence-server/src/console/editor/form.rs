//! The plan form's model: the rows and groups a plan's spec makes, the posted fields they
//! are read from, and the spec they write back.

use std::collections::BTreeMap;

use qfence_model::config::keys;
use serde_json::{Map, Value, json};

use super::*;

// ---- the form's model ----

/// The plan-level typed fields (numbers, and the standby posture): key in the file, label,
/// what leaving it empty means.
pub(super) const TIMINGS: &[(&str, &str, &str)] = &[
    ("interval_seconds", "Interval (s)", "2"),
    (
        "freshness_seconds",
        "Freshness (s)",
        "6, or 3 × a longer interval",
    ),
    (
        "recovery_after_seconds",
        "Recovery after (s)",
        "4, or 2 × a longer interval",
    ),
    ("max_recoveries", "Max recoveries", "1"),
    (
        "failover_after_seconds",
        "Failover after (s)",
        "8, or 4 × a longer interval",
    ),
    (
        "failover_after_definitive",
        "Failover after definitive readings",
        "off",
    ),
    (
        "fence_timeout_seconds",
        "Fence timeout (s)",
        "6, or 3 × a longer interval",
    ),
    ("max_retries", "Max retries", "2"),
    // A word, not a number, but typed the same way (a third select would be one more kind).
    ("standby", "Standbys (cold or hot)", "cold"),
    (
        "rejoin",
        "Rejoin after a failover (manual or auto)",
        "manual",
    ),
];

/// The plan-level yes/no fields: key, label, default.
pub(super) const SWITCHES: &[(&str, &str, &str)] = &[
    ("auto_failover", "Automatic failover", "yes"),
    ("unfence_on_promote", "Unfence on promote", "no"),
];

pub(super) const SERVICE: &str = "service";

/// One binding row, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::console) struct Row {
    /// The prefix of its fields' names: `b:GROUP:INDEX`.
    pub key: String,
    pub controller: String,
    pub capability: String,
    pub resource: String,
    pub role: String,
    pub required: bool,
    /// `key=value, key=value`.
    pub params: String,
}

impl Row {
    /// Whether nothing was typed in it (a role the form pre-set does not count).
    pub(super) fn is_blank_in(&self, group: &str) -> bool {
        self.controller.trim().is_empty()
            && self.capability.trim().is_empty()
            && self.resource.trim().is_empty()
            && (self.role.trim().is_empty() || self.role == default_role(group))
            && self.params.trim().is_empty()
            && !self.required
    }
}

/// A site's instance, or the service bindings.
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::console) struct Group {
    /// The site's name, or `service`.
    pub name: String,
    pub rows: Vec<Row>,
}

impl Group {
    pub fn is_service(&self) -> bool {
        self.name == SERVICE
    }
}

/// Everything the form holds, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::console) struct PlanForm {
    pub name: String,
    pub owner: String,
    /// Comma-separated site names.
    pub priority: String,
    /// By key of [`TIMINGS`].
    pub timings: BTreeMap<String, String>,
    /// By key of [`SWITCHES`]: `""` (default), `"true"` or `"false"`.
    pub switches: BTreeMap<String, String>,
    /// The sites' instances in name order, then the service bindings.
    pub groups: Vec<Group>,
    /// A group that asked for one more blank row ("Add a binding" without the script).
    pub extra_blank: Option<String>,
    /// The JSON text view as posted (shown again only when it could not be loaded).
    pub raw: Option<String>,
}

/// A scalar of the plan's JSON as the text a field shows.
pub(super) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl PlanForm {
    /// The form showing a plan's spec (`plans.NAME` as the file writes it), with one group per
    /// site of `sites` and of the plan.
    pub fn from_spec(name: &str, spec: &Value, sites: &[String]) -> Self {
        let mut f = PlanForm {
            name: name.to_owned(),
            owner: spec.get("owner").map(text_of).unwrap_or_default(),
            priority: match spec.get("priority") {
                Some(Value::Array(a)) => a.iter().map(text_of).collect::<Vec<_>>().join(", "),
                Some(v) => text_of(v),
                None => String::new(),
            },
            ..Default::default()
        };
        for (k, _, _) in TIMINGS {
            if let Some(v) = spec.get(*k) {
                f.timings.insert((*k).to_owned(), text_of(v));
            }
        }
        for (k, _, _) in SWITCHES {
            if let Some(v) = spec.get(*k) {
                f.switches.insert((*k).to_owned(), text_of(v));
            }
        }
        let rows_of = |group: &str, v: Option<&Value>| -> Vec<Row> {
            let Some(Value::Array(items)) = v else {
                return Vec::new();
            };
            items
                .iter()
                .map(|b| Row {
                    key: String::new(),
                    controller: b.get("controller").map(text_of).unwrap_or_default(),
                    capability: b.get("capability").map(text_of).unwrap_or_default(),
                    resource: b.get("resource").map(text_of).unwrap_or_default(),
                    role: b
                        .get("role")
                        .map(text_of)
                        .unwrap_or_else(|| default_role(group)),
                    required: b.get("required").and_then(Value::as_bool).unwrap_or(false),
                    params: match b.get("params") {
                        Some(Value::Object(m)) => m
                            .iter()
                            .map(|(k, v)| format!("{k}={}", text_of(v)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        _ => String::new(),
                    },
                })
                .collect()
        };
        let instances = spec.get("instances").and_then(Value::as_object);
        let mut names: Vec<String> = sites.to_vec();
        if let Some(m) = instances {
            for k in m.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        names.sort();
        for site in names {
            let rows = rows_of(&site, instances.and_then(|m| m.get(&site)));
            f.groups.push(Group { name: site, rows });
        }
        f.groups.push(Group {
            name: SERVICE.into(),
            rows: rows_of(SERVICE, spec.get("service")),
        });
        f.renumber();
        f
    }

    /// The form as posted. `sites` are the configuration's sites (a group for each even if
    /// the post has none). Returns the form and the action the button asked for.
    pub fn from_fields(fields: &[(String, String)], sites: &[String]) -> (Self, Action) {
        let mut f = PlanForm::default();
        let mut action = Action::Save;
        let mut rows: BTreeMap<(String, u32), Row> = BTreeMap::new();
        let mut groups: Vec<String> = sites.to_vec();
        for (k, v) in fields {
            match k.as_str() {
                "name" => f.name = v.trim().to_owned(),
                "owner" => f.owner = v.trim().to_owned(),
                "priority" => f.priority = v.clone(),
                "action" => action = Action::parse(v),
                "raw" => f.raw = Some(v.clone()),
                _ if TIMINGS.iter().any(|(t, _, _)| t == k) => {
                    f.timings.insert(k.clone(), v.clone());
                }
                _ if SWITCHES.iter().any(|(t, _, _)| t == k) => {
                    f.switches.insert(k.clone(), v.clone());
                }
                _ => {
                    // b:GROUP:INDEX:FIELD
                    let mut parts = k.splitn(4, ':');
                    let (Some("b"), Some(group), Some(idx), Some(field)) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let Ok(idx) = idx.parse::<u32>() else {
                        continue;
                    };
                    if !groups.iter().any(|g| g == group) && group != SERVICE {
                        groups.push(group.to_owned());
                    }
                    let row = rows.entry((group.to_owned(), idx)).or_default();
                    match field {
                        "controller" => row.controller = v.trim().to_owned(),
                        "capability" => row.capability = v.trim().to_owned(),
                        "resource" => row.resource = v.clone(),
                        "role" => row.role = v.trim().to_owned(),
                        "required" => row.required = v == "true" || v == "on",
                        "params" => row.params = v.clone(),
                        _ => {}
                    }
                }
            }
        }
        match &action {
            Action::Remove(g, i) => {
                rows.remove(&(g.clone(), *i));
            }
            Action::Add(g) => f.extra_blank = Some(g.clone()),
            _ => {}
        }
        groups.sort();
        groups.push(SERVICE.into());
        for g in groups {
            let rows: Vec<Row> = rows
                .iter()
                .filter(|((rg, _), r)| *rg == g && !r.is_blank_in(&g))
                .map(|(_, r)| r.clone())
                .collect();
            f.groups.push(Group { name: g, rows });
        }
        f.renumber();
        (f, action)
    }

    /// Gives every row the key of its position: issue paths index the bindings as sent, and
    /// blank rows are not sent.
    pub(super) fn renumber(&mut self) {
        for g in &mut self.groups {
            for (i, r) in g.rows.iter_mut().enumerate() {
                r.key = format!("b:{}:{i}", g.name);
            }
        }
    }

    /// Appends one blank row to each group, for the next binding (two to the group that
    /// asked for one more).
    pub(super) fn with_blank_rows(mut self) -> Self {
        for g in &mut self.groups {
            let n = if self.extra_blank.as_deref() == Some(g.name.as_str()) {
                2
            } else {
                1
            };
            for _ in 0..n {
                let i = g.rows.len();
                g.rows.push(Row {
                    key: format!("b:{}:{i}", g.name),
                    role: default_role(&g.name),
                    ..Default::default()
                });
            }
        }
        self
    }

    /// The plan as the file writes it under `plans.NAME`, plus the problems that stop the form
    /// from even saying it (a `params` field that is not `key=value` pairs). Empty fields are
    /// left out, so validation reports what is missing in its own words.
    pub fn to_spec(&self) -> (Value, FieldIssues) {
        let mut issues = FieldIssues::default();
        let mut spec = Map::new();
        if !self.owner.is_empty() {
            spec.insert("owner".into(), json!(self.owner));
        }
        let priority: Vec<Value> = self
            .priority
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| json!(s))
            .collect();
        if !priority.is_empty() {
            spec.insert("priority".into(), Value::Array(priority));
        }
        for (k, _, _) in TIMINGS {
            if let Some(v) = self
                .timings
                .get(*k)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
            {
                spec.insert((*k).to_owned(), number_or_text(v));
            }
        }
        for (k, _, _) in SWITCHES {
            match self.switches.get(*k).map(String::as_str) {
                Some("true") => {
                    spec.insert((*k).to_owned(), json!(true));
                }
                Some("false") => {
                    spec.insert((*k).to_owned(), json!(false));
                }
                _ => {}
            }
        }
        let mut instances = Map::new();
        let mut service = Vec::new();
        for g in &self.groups {
            let bindings: Vec<Value> = g
                .rows
                .iter()
                .filter(|r| !r.is_blank_in(&g.name))
                .map(|r| {
                    let mut b = Map::new();
                    for (k, v) in [
                        ("controller", &r.controller),
                        ("capability", &r.capability),
                        ("resource", &r.resource),
                        ("role", &r.role),
                    ] {
                        if !v.trim().is_empty() {
                            b.insert(k.into(), json!(v));
                        }
                    }
                    if r.required {
                        b.insert("required".into(), json!(true));
                    }
                    match parse_params(&r.params) {
                        Ok(p) if p.is_empty() => {}
                        Ok(p) => {
                            b.insert("params".into(), Value::Object(p));
                        }
                        Err(m) => issues.add(Some(format!("{}:params", r.key)), m),
                    }
                    Value::Object(b)
                })
                .collect();
            if g.is_service() {
                service = bindings;
            } else if !bindings.is_empty() {
                instances.insert(g.name.clone(), Value::Array(bindings));
            }
        }
        spec.insert("instances".into(), Value::Object(instances));
        if !service.is_empty() {
            spec.insert("service".into(), Value::Array(service));
        }
        (Value::Object(spec), issues)
    }
}

pub(super) fn default_role(group: &str) -> String {
    if group == SERVICE {
        "service".into()
    } else {
        String::new()
    }
}

/// Fills `form` from its JSON text view (the plan as `plans.NAME` writes it). Anything the
/// form could not show is refused rather than dropped: the text is kept with the reason at
/// the text view, and the form is left as it was.
pub(in crate::console) fn load_raw(
    form: &mut PlanForm,
    sites: &[String],
    issues: &mut FieldIssues,
) {
    let text = form.raw.clone().unwrap_or_default();
    let refuse = |issues: &mut FieldIssues, m: String| {
        issues.add(Some("raw".into()), format!("{m}; nothing was loaded"));
    };
    let spec = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return refuse(
                issues,
                "expected a JSON object: the plan as `plans.NAME` writes it".into(),
            );
        }
        Err(e) => return refuse(issues, format!("not valid JSON: {e}")),
    };
    let unknown = unplaceable(&spec);
    if !unknown.is_empty() {
        return refuse(
            issues,
            format!("the form has no place for {}", unknown.join(", ")),
        );
    }
    let name = form.name.clone();
    *form = PlanForm::from_spec(&name, &Value::Object(spec), sites);
}

/// What in a plan's JSON the form has no place for (keys, and lists or bindings of the wrong
/// shape), so that nothing is silently dropped on the way into the form.
pub(in crate::console) fn unplaceable(spec: &Map<String, Value>) -> Vec<String> {
    let mut unknown: Vec<String> = spec
        .keys()
        .filter(|k| !keys::PLAN.contains(&k.as_str()))
        .map(|k| format!("{k:?}"))
        .collect();
    let groups = spec
        .get("instances")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter().map(|(k, v)| (format!("instances.{k}"), v)))
        .chain(spec.get("service").map(|v| ("service".to_owned(), v)));
    for (at, list) in groups {
        let Some(list) = list.as_array() else {
            unknown.push(format!("{at} (not a list)"));
            continue;
        };
        for (i, b) in list.iter().enumerate() {
            match b.as_object() {
                Some(b) => unknown.extend(
                    b.keys()
                        .filter(|k| !keys::BINDING.contains(&k.as_str()))
                        .map(|k| format!("{at}[{i}].{k}")),
                ),
                None => unknown.push(format!("{at}[{i}] (not a mapping)")),
            }
        }
    }
    unknown
}

/// `120` and `0.5` as numbers, anything else as typed (validation says what it expected).
pub(in crate::console) fn number_or_text(v: &str) -> Value {
    if let Ok(i) = v.parse::<i64>() {
        json!(i)
    } else if let Ok(f) = v.parse::<f64>()
        && f.is_finite()
    {
        json!(f)
    } else {
        json!(v)
    }
}

/// `key=value, key=value` (commas or new lines between pairs).
pub(in crate::console) fn parse_params(text: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for pair in text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.insert(k.trim().to_owned(), json!(v.trim()));
            }
            _ => {
                return Err(format!(
                    "expected key=value pairs separated by commas, found {pair:?}"
                ));
            }
        }
    }
    Ok(out)
}

/// What the posted form asks for.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::console) enum Action {
    /// Validate and save (create, or stage and apply).
    Save,
    /// Validate and stage only (edit).
    Stage,
    /// Show the form again with choices narrowed to what was picked (the no-script path).
    Refresh,
    /// Drop one binding row and show the form again.
    Remove(String, u32),
    /// Show the form again with one more blank row in a group.
    Add(String),
    /// Fill the form from the JSON text view.
    LoadRaw,
}

impl Action {
    pub(super) fn parse(v: &str) -> Self {
        match v {
            "stage" => Action::Stage,
            "refresh" => Action::Refresh,
            "load_raw" => Action::LoadRaw,
            _ if v.starts_with("add:") => Action::Add(v["add:".len()..].to_owned()),
            _ => match v.strip_prefix("remove:").and_then(|r| r.rsplit_once(':')) {
                Some((g, i)) => match i.parse() {
                    Ok(i) => Action::Remove(g.to_owned(), i),
                    Err(_) => Action::Refresh,
                },
                None => Action::Save,
            },
        }
    }
}
