//! What the registration form holds: its fields by step, the spec they make, and their
//! validation with each issue placed on its field.

use std::collections::BTreeMap;

use qfence_model::config::{Issue, keys, plan_api};
use qfence_model::{ControllerId, ControllerType};
use serde_json::{Map, Value, json};

use super::page::Context;
use crate::console::editor::{FieldIssues, number_or_text, parse_params};
use qfence_runtime::backend::CheckedController;

/// Every field of the form: its name and the step it is typed at (0 for the ones the
/// server fills).
pub(super) const FIELDS: &[(&str, u8)] = &[
    ("name", 1),
    ("type", 1),
    ("site", 1),
    ("reach", 1),
    ("timeout_seconds", 1),
    ("endpoint", 1),
    ("username", 1),
    ("auth", 1),
    ("cipher_suite", 1),
    ("token_id", 1),
    ("vdom", 1),
    ("agent", 1),
    ("options", 1),
    ("level", 1),
    ("project", 1),
    ("user_domain", 1),
    ("project_domain", 1),
    ("application_credential_id", 1),
    ("interface", 1),
    ("region", 1),
    ("tls_mode", 1),
    ("tls_ca_file", 1),
    ("tls_pin", 1),
    ("secret", 2),
    ("pin_fingerprint", 3),
    ("probed_fingerprint", 0),
];

/// The per-type fields: name, label, placeholder. Which types have each is the model's
/// [`keys::controller_type`].
pub(super) const TYPE_FIELDS: &[(&str, &str, &str)] = &[
    ("endpoint", "Endpoint", "https://bmc.example:443"),
    ("username", "Username", "qfence"),
    ("auth", "Authentication", "session (default) or basic"),
    ("cipher_suite", "Cipher suite", "17 (default), 3, 8 or 12"),
    ("token_id", "API token id", "qfence@pve!fence"),
    ("vdom", "VDOM", "root (optional)"),
    ("agent", "Fence agent", "fence_ipmilan"),
    (
        "options",
        "Agent options",
        "ip=10.0.0.5, username=admin (no password)",
    ),
    (
        "level",
        "Fence level",
        "compute (default), network or application",
    ),
    ("project", "Keystone project", "admin"),
    ("user_domain", "Keystone user domain", "Default (default)"),
    (
        "project_domain",
        "Keystone project domain",
        "Default (default)",
    ),
    (
        "application_credential_id",
        "Application credential id",
        "instead of username and project (optional)",
    ),
    (
        "interface",
        "Endpoint interface",
        "public (default), internal or admin",
    ),
    ("region", "Region", "RegionOne (optional)"),
];

/// The types that have the per-type field `key`, as the template reads them: `"redfish ipmi"`.
pub(super) fn types_with(key: &str) -> String {
    keys::types_with(key)
        .map(ControllerType::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What each type is, in a line (shown next to the type).
pub(super) fn type_hint(t: ControllerType) -> &'static str {
    match t {
        ControllerType::Redfish => {
            "A BMC over Redfish (HTTPS). The secret holds the account's password."
        }
        ControllerType::Ipmi => {
            "A BMC over IPMI LAN (RMCP+, UDP 623). The secret holds the account's password."
        }
        ControllerType::Proxmox => {
            "A Proxmox VE cluster's API. With a token id, the secret holds the token's UUID; \
             with a username (ticket login), the password."
        }
        ControllerType::Fortigate => "A FortiGate's REST API. The secret holds the API key.",
        ControllerType::Docker => {
            "A Docker Engine (unix socket or HTTPS with TLS). No secret needed."
        }
        ControllerType::Postgres => "A PostgreSQL server. The secret holds the role's password.",
        ControllerType::FenceAgent => {
            "An installed Pacemaker fence agent. The secret is passed as password= at call time."
        }
        ControllerType::Nova => "OpenStack Nova through Keystone v3 (Instance HA).",
        ControllerType::Agent => {
            "The host agents (qfence agent) of its site. Not built yet: every call is refused \
             with \"no agent connected\". No secret."
        }
    }
}

/// Everything typed so far: field name → values (only `reach` has several).
#[derive(Debug, Clone, Default)]
pub(super) struct ControllerForm {
    values: BTreeMap<String, Vec<String>>,
}

impl ControllerForm {
    pub(super) fn from_fields(fields: &[(String, String)]) -> Self {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in fields {
            if FIELDS.iter().any(|(f, _)| f == k) {
                values.entry(k.clone()).or_default().push(v.clone());
            }
        }
        ControllerForm { values }
    }

    pub(super) fn get(&self, k: &str) -> String {
        self.values
            .get(k)
            .and_then(|v| v.iter().rev().find(|s| !s.is_empty()).or(v.last()))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }

    pub(super) fn set(&mut self, k: &str, v: impl Into<String>) {
        self.values.insert(k.to_owned(), vec![v.into()]);
    }

    pub(super) fn reach(&self) -> Vec<String> {
        self.values
            .get("reach")
            .map(|v| v.iter().filter(|s| !s.is_empty()).cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn pinned(&self) -> bool {
        self.get("pin_fingerprint") == "true" && !self.get("probed_fingerprint").is_empty()
    }

    /// The fields not typed at `step`, as hidden inputs: they travel with the form.
    pub(super) fn hidden(&self, step: u8) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (f, s) in FIELDS {
            if *s == step {
                continue;
            }
            for v in self.values.get(*f).into_iter().flatten() {
                out.push(((*f).to_owned(), v.clone()));
            }
        }
        out
    }

    /// The controller as the file writes it under `controllers.NAME`, and the problems that
    /// stop the form from saying it (agent options that are not `key=value`). Empty fields are
    /// left out so validation says what is missing in its own words; fields of other types
    /// than the chosen one are kept in the form but not sent.
    pub(super) fn to_spec(&self) -> (Value, FieldIssues) {
        let mut issues = FieldIssues::default();
        let mut m = Map::new();
        let ty = self.get("type");
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_owned(), v);
        };
        if !ty.is_empty() {
            put("type", json!(ty));
        }
        let site = self.get("site");
        if !site.is_empty() {
            put("site", json!(site));
        }
        let reach = self.reach();
        if !reach.is_empty() {
            put("reach", json!(reach));
        }
        let secret = self.get("secret");
        if !secret.is_empty() {
            put("secret", json!(secret));
        }
        let timeout = self.get("timeout_seconds");
        if !timeout.is_empty() {
            put("timeout_seconds", number_or_text(&timeout));
        }
        let typed = ty.parse::<ControllerType>().ok();
        for (f, _, _) in TYPE_FIELDS {
            if !typed.is_some_and(|t| keys::controller_type(t).contains(f)) {
                continue;
            }
            let v = self.get(f);
            if v.is_empty() {
                continue;
            }
            match *f {
                "cipher_suite" => put(f, number_or_text(&v)),
                "options" => match parse_params(&v) {
                    Ok(o) => put(f, Value::Object(o)),
                    Err(e) => issues.add(Some("options".into()), e),
                },
                _ => put(f, json!(v)),
            }
        }
        let tls = if self.pinned() {
            Some(json!({"pin": self.get("probed_fingerprint")}))
        } else {
            match self.get("tls_mode").as_str() {
                "insecure" => Some(json!({"insecure": true})),
                "ca_file" => Some(json!({"ca_file": self.get("tls_ca_file")})),
                "pin" => Some(json!({"pin": self.get("tls_pin")})),
                _ => None,
            }
        };
        if let Some(t) = tls {
            put("tls", t);
        }
        (Value::Object(m), issues)
    }
}

/// Why a secret reference looks like the secret itself, if it does. Validation accepts any
/// valid name; a name that is a UUID (a Proxmox token's secret) or a long mix of upper case,
/// lower case and digits (an API key, a password) is far more likely a pasted credential than
/// the name of one, and a credential must never be stored in the configuration.
pub(super) fn looks_inline(secret: &str) -> Option<&'static str> {
    let s = secret.trim();
    let uuid = s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if uuid {
        return Some(
            "this looks like a token's secret (a UUID), not the name of a secret: store it in \
             each orchestrator's secret store and write its name here; it was not kept",
        );
    }
    let mixed = s.len() >= 20
        && s.chars().any(|c| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().any(|c| c.is_ascii_digit())
        && !s.contains(['-', '_', '.']);
    if mixed {
        return Some(
            "this looks like a credential (a long mix of letters and digits), not the name of a \
             secret: store it in each orchestrator's secret store and write its name here; it \
             was not kept",
        );
    }
    None
}

/// `scheme://user:password@host...` without `:password`, when the URL carries one.
pub(super) fn without_password(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}@{host}{tail}"))
}

/// The form field an issue's path names (`controllers.NAME.tls.pin` is `tls`), if any.
pub(super) fn field_of(path: &str, name: &str) -> Option<String> {
    let rest = path.strip_prefix(&format!("controllers.{name}."))?;
    let head = rest.split(['.', '[']).next().unwrap_or(rest);
    match head {
        "tls" => Some("tls".into()),
        h if FIELDS.iter().any(|(f, _)| *f == h) => Some(h.to_owned()),
        _ => None,
    }
}

/// The step a field is typed at (issues about the whole entry: step 1).
pub(super) fn step_of(field: &str) -> u8 {
    match field {
        "tls" => 1,
        f => FIELDS
            .iter()
            .find(|(n, _)| *n == f)
            .map_or(1, |(_, s)| (*s).max(1)),
    }
}

/// Validation's issues up to `upto` (later steps' are not the user's concern yet), placed
/// on their fields. Returns the earliest step with an issue.
pub(super) fn place(into: &mut FieldIssues, issues: &[Issue], name: &str, upto: u8) -> Option<u8> {
    let mut earliest: Option<u8> = None;
    for i in issues {
        let field = field_of(&i.path, name);
        let step = field.as_deref().map_or(1, step_of);
        if step > upto {
            continue;
        }
        if !i.is_error() {
            // Warnings are shown at the test and the capabilities (step 3 and 4), not as
            // refusals.
            continue;
        }
        earliest = Some(earliest.map_or(step, |e: u8| e.min(step)));
        match field {
            Some(f) => into.add(Some(f), i.message.clone()),
            None if i.path.is_empty() => into.add(None, i.message.clone()),
            None => into.add(None, format!("{}: {}", i.path, i.message)),
        }
    }
    earliest
}

/// Validates the form up to `upto`: the checked controller when nothing stops it, and the
/// issues placed on their fields with the earliest step that has one.
pub(super) fn validate(
    ctx: &Context,
    form: &ControllerForm,
    upto: u8,
) -> (
    Option<CheckedController>,
    FieldIssues,
    Option<u8>,
    Vec<String>,
) {
    let (spec, mut issues) = form.to_spec();
    let mut earliest = if issues.is_empty() { None } else { Some(1) };
    let name = form.get("name");
    let id = match ControllerId::new(name.as_str()) {
        Ok(id) if ctx.controllers.contains(&name) => {
            issues.add(
                Some("name".into()),
                format!("controller {name:?} already exists; pick another name"),
            );
            earliest = Some(1);
            Some(id)
        }
        Ok(id) => Some(id),
        Err(e) => {
            let m = if name.is_empty() {
                "missing: the controller needs a name".to_owned()
            } else {
                format!("{name:?} is not a controller name: {e}")
            };
            issues.add(Some("name".into()), m);
            earliest = Some(1);
            None
        }
    };
    let checked_name = id
        .as_ref()
        .map_or("new-controller".to_owned(), |i| i.as_str().to_owned());
    let mut warnings = Vec::new();
    let checked = match plan_api::check_controller(&ctx.base, &checked_name, &spec) {
        Ok(c) => {
            warnings = c
                .warnings
                .iter()
                .map(|w| format!("{}: {}", w.path, w.message))
                .collect();
            Some(c)
        }
        Err(found) => {
            if let Some(e) = place(&mut issues, &found, &checked_name, upto) {
                earliest = Some(earliest.map_or(e, |x| x.min(e)));
            }
            None
        }
    };
    let ok = match (checked, id) {
        (Some(c), Some(id)) if issues.is_empty() => Some(CheckedController {
            name: id,
            spec,
            config: c.value,
            warnings: c.warnings,
        }),
        _ => None,
    };
    (ok, issues, earliest, warnings)
}
