//! The generic readers: each reads one kind of value, reports what it expected and what it
//! found, and returns `None` on a problem.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::{Decoder, child, index, list_names};
use crate::config::issue::{Issue, Severity};
use crate::config::keys;
use crate::config::tree::{Node, Value};
use crate::ids::{NameError, SiteId, check_name};

/// A mapping's entries by key, after duplicate and unknown keys were reported.
pub(super) struct Fields<'a> {
    path: String,
    entries: Vec<(&'static str, &'a Node)>,
}

impl<'a> Fields<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Node> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| *n)
    }

    pub(super) fn path(&self, key: &str) -> String {
        child(&self.path, key)
    }
}

impl Decoder {
    fn line_of(&self, path: &str) -> Option<u32> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p).filter(|l| **l > 0) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '[']);
            match cut {
                Some(i) => p = &p[..i],
                None if !p.is_empty() => p = "",
                None => return None,
            }
        }
    }

    pub(super) fn push(&mut self, path: &str, severity: Severity, message: String) {
        let line = self.line_of(path);
        self.issues.push(Issue {
            path: path.to_owned(),
            message,
            severity,
            line,
        });
    }

    pub(super) fn error(&mut self, path: &str, message: impl Into<String>) {
        self.push(path, Severity::Error, message.into());
    }

    pub(super) fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.push(path, Severity::Warning, message.into());
    }

    pub(super) fn visit(&mut self, path: &str, node: &Node) {
        self.lines.entry(path.to_owned()).or_insert(node.line);
    }

    /// The keys of a mapping that has a fixed set of them. `null` reads as an empty mapping.
    pub(super) fn fields<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        allowed: &[&'static str],
    ) -> Option<Fields<'a>> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => &[][..],
            Value::Map(entries) => entries.as_slice(),
            other => {
                self.error(
                    path,
                    format!(
                        "expected a mapping with keys {}, found {}",
                        allowed.join(", "),
                        other.kind()
                    ),
                );
                return None;
            }
        };
        let mut out = Fields {
            path: path.to_owned(),
            entries: Vec::new(),
        };
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!(
                        "keys must be strings, found {} on line {}",
                        k.value.kind(),
                        k.line
                    ),
                );
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(&p, format!("duplicate key {key:?} (first on line {first})"));
                continue;
            }
            seen.insert(key.clone(), k.line);
            if keys::is_credential(&key) {
                // Reported by the credential scan, with its own message.
                continue;
            }
            match allowed.iter().find(|a| **a == key) {
                Some(a) => out.entries.push((a, v)),
                None => self.error(
                    &p,
                    format!("unknown key {key:?}; allowed: {}", allowed.join(", ")),
                ),
            }
        }
        Some(out)
    }

    /// A required key: reported as missing when absent.
    pub(super) fn require<'a>(
        &mut self,
        f: &Fields<'a>,
        key: &str,
        what: &str,
    ) -> Option<&'a Node> {
        let n = f.get(key);
        if n.is_none() {
            self.error(&f.path(key), format!("missing: {what} is required"));
        }
        n
    }

    /// A mapping from names to values, in file order, each name checked and duplicates
    /// reported (the first one wins).
    pub(super) fn named<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        what: &str,
    ) -> Vec<(String, &'a Node)> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => return Vec::new(),
            Value::Map(entries) => entries,
            other => {
                self.error(
                    path,
                    format!(
                        "expected a mapping of {what} by name, found {}",
                        other.kind()
                    ),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!(
                        "expected {what} names as keys, found {} on line {}",
                        k.value.kind(),
                        k.line
                    ),
                );
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(
                    &p,
                    format!("duplicate name {key:?}: already defined on line {first}"),
                );
                continue;
            }
            seen.insert(key.clone(), k.line);
            if let Err(e) = check_name(&key) {
                self.error(&p, e.to_string());
                continue;
            }
            out.push((key, v));
        }
        out
    }

    pub(super) fn list<'a>(&mut self, node: &'a Node, path: &str, what: &str) -> &'a [Node] {
        self.visit(path, node);
        match &node.value {
            Value::Null => &[],
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.visit(&index(path, i), item);
                }
                items
            }
            other => {
                self.error(
                    path,
                    format!("expected a list of {what}, found {}", other.kind()),
                );
                &[]
            }
        }
    }

    pub(super) fn text(&mut self, node: &Node, path: &str, what: &str) -> Option<String> {
        self.visit(path, node);
        match node.value.as_text() {
            Some(s) if s.trim().is_empty() => {
                self.error(path, format!("expected {what}, found an empty string"));
                None
            }
            Some(s) => Some(s),
            None => {
                self.error(
                    path,
                    format!("expected {what}, found {}", node.value.kind()),
                );
                None
            }
        }
    }

    pub(super) fn name<T: TryFrom<String, Error = NameError>>(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
    ) -> Option<T> {
        let s = self.text(node, path, what)?;
        match T::try_from(s) {
            Ok(n) => Some(n),
            Err(e) => {
                self.error(path, e.to_string());
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        self.visit(path, node);
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.error(
                    path,
                    format!("expected true or false, found {}", node.value.kind()),
                );
                None
            }
        }
    }

    pub(super) fn seconds(&mut self, node: &Node, path: &str) -> Option<Duration> {
        self.visit(path, node);
        let v = match node.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => f64::NAN,
        };
        let floor = crate::config::MIN_DURATION.as_secs_f64();
        if v.is_finite() && v > 0.0 && v < floor {
            self.error(
                path,
                format!(
                    "{v:?} s is below the floor of {floor} s for a duration: decisions count \
                     whole milliseconds and a check or call takes milliseconds to tens of them, \
                     so a shorter one runs as 0 s or faster than anything it waits for can \
                     answer"
                ),
            );
            None
        } else if v.is_finite() && v > 0.0 && v <= 1e9 {
            Duration::try_from_secs_f64(v).ok()
        } else {
            self.error(
                path,
                format!(
                    "expected a positive number of seconds (fractions allowed), found {}",
                    node.value.kind()
                ),
            );
            None
        }
    }

    pub(super) fn count(&mut self, node: &Node, path: &str) -> Option<u32> {
        self.visit(path, node);
        match node.value {
            Value::Int(i) if (0..=i128::from(u32::MAX)).contains(&i) => Some(i as u32),
            _ => {
                self.error(
                    path,
                    format!(
                        "expected a whole number, 0 or more, found {}",
                        node.value.kind()
                    ),
                );
                None
            }
        }
    }

    /// One of a fixed set of words.
    pub(super) fn word<T: Copy>(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.text(node, path, what)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, v)) => Some(*v),
            None => {
                self.error(
                    path,
                    format!(
                        "unknown {what} {s:?}; allowed: {}",
                        list_names(choices.iter().map(|(n, _)| *n))
                    ),
                );
                None
            }
        }
    }

    /// A reference to a declared site. Witness sites are refused when `allow_witness` is false.
    pub(super) fn site_ref(
        &mut self,
        node: &Node,
        path: &str,
        allow_witness: bool,
        why: &str,
    ) -> Option<SiteId> {
        let site: SiteId = self.name(node, path, "a site name")?;
        match self.declared_sites.get(site.as_str()) {
            None => {
                let names = list_names(self.declared_sites.keys().map(String::as_str));
                self.error(path, format!("unknown site \"{site}\"; sites: {names}"));
                None
            }
            Some(true) if !allow_witness => {
                self.error(path, format!("\"{site}\" is a witness site, which {why}"));
                None
            }
            Some(_) => Some(site),
        }
    }

    pub(super) fn opt<T>(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        default: T,
        read: impl FnOnce(&mut Self, &Node, &str) -> Option<T>,
    ) -> Option<T> {
        match f.get(key) {
            None => Some(default),
            Some(n) => read(self, n, &f.path(key)),
        }
    }

    /// A free-form mapping of names to scalar values (agent options, binding params).
    pub(super) fn string_map(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
    ) -> Option<BTreeMap<String, String>> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => return Some(BTreeMap::new()),
            Value::Map(e) => e,
            other => {
                self.error(
                    path,
                    format!("expected a mapping of {what}, found {}", other.kind()),
                );
                return None;
            }
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!("keys must be strings, found {}", k.value.kind()),
                );
                ok = false;
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(&p, format!("duplicate key {key:?} (first on line {first})"));
                ok = false;
                continue;
            }
            seen.insert(key.clone(), k.line);
            if keys::is_credential(&key) {
                ok = false;
                continue;
            }
            let value = match &v.value {
                Value::Bool(b) => Some(b.to_string()),
                _ => self.text(v, &p, "a value"),
            };
            match value {
                Some(value) => {
                    out.insert(key, value);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}
