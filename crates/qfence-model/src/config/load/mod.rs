//! Phase two, *validate*: the generic tree decoded by hand into a [`Config`], collecting every
//! issue with its path instead of stopping at the first, then cross-checked as a whole.
//!
//! The decoder never panics on any tree: each helper reports what it expected and what it
//! found, and returns `None` so the caller simply leaves that value out. A [`ValidatedConfig`]
//! is made only when no error was found.

mod bindings;
mod cluster;
mod controllers;
mod credentials;
mod instance_ha;
mod kinds;
mod nova;
mod plans;
mod read;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::issue::{self, Issue, Severity};
use super::tree::{self, Node, Value};
use super::{Config, ValidatedConfig, keys};
use crate::catalog::ControllerType;
use crate::ids::SiteId;

/// A configuration that passed validation, and the warnings it passed with.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration.
    pub config: ValidatedConfig,
    /// Problems that do not stop it from being used, sorted by path.
    pub warnings: Vec<Issue>,
}

/// Parses and validates a configuration. On failure, every issue found (errors and warnings),
/// sorted by path. `source` names the text in the one issue a YAML syntax error gives.
pub fn load_str(text: &str, source: &str) -> Result<Loaded, Vec<Issue>> {
    let root = match tree::parse(text) {
        Ok(root) => root,
        Err(e) => {
            return Err(vec![Issue {
                path: String::new(),
                message: format!("{source} is not valid YAML: {}", e.message),
                severity: Severity::Error,
                line: (e.line > 0).then_some(e.line),
            }]);
        }
    };
    let mut d = Decoder::default();
    let config = d.config(&root);
    let mut issues = d.issues;
    issue::sort(&mut issues);
    match config {
        Some(config) if !issues.iter().any(Issue::is_error) => Ok(Loaded {
            config: ValidatedConfig::new_unchecked(config),
            warnings: issues,
        }),
        _ => Err(issues),
    }
}

/// Why a configuration file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration.
    #[error("{file}: {} error(s) in the configuration", issues.iter().filter(|i| i.is_error()).count())]
    Invalid {
        file: String,
        /// Every issue found, errors and warnings, sorted by path.
        issues: Vec<Issue>,
    },
}

/// Reads a file and loads it with [`load_str`]. The only I/O in this crate: reading the text.
pub fn load_file(path: impl AsRef<std::path::Path>) -> Result<Loaded, LoadError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        file: file.clone(),
        source,
    })?;
    load_str(&text, &file).map_err(|issues| LoadError::Invalid { file, issues })
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn list_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.into_iter().collect();
    if v.is_empty() {
        "(none)".to_owned()
    } else {
        v.join(", ")
    }
}

/// Seconds as written: `30`, `0.5`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// The decoder's state: the issues found so far and what is known of the names declared.
#[derive(Default)]
struct Decoder {
    issues: Vec<Issue>,
    /// The line of every path the decoder visited, for issues found after decoding.
    lines: HashMap<String, u32>,
    /// Names declared, even when what they name failed to decode: a reference to a broken
    /// controller should not also be reported as unknown.
    declared_sites: BTreeMap<String, bool>,
    declared_controllers: BTreeSet<String>,
    /// What is known of each controller even when the rest of it failed to decode, so its
    /// bindings and its callers are still checked: every problem at once.
    controller_types: BTreeMap<String, ControllerType>,
    controller_sites: BTreeMap<String, (SiteId, Vec<SiteId>)>,
}

impl Decoder {
    /// The whole document: its sections, each read by its own module.
    fn config(&mut self, root: &Node) -> Option<Config> {
        self.scan_credentials(root, "");
        if root.value == Value::Null {
            self.error(
                "",
                format!(
                    "the configuration is empty; expected keys {}",
                    keys::TOP.join(", ")
                ),
            );
            return None;
        }
        let f = self.fields(root, "", keys::TOP)?;
        let cluster = self
            .require(&f, "cluster", "the cluster's settings")
            .and_then(|n| self.cluster(n, "cluster"));
        let sites = match self.require(&f, "sites", "at least one site") {
            Some(n) => self.sites(n, "sites"),
            None => Some(BTreeMap::new()),
        };
        let orchestrators = match self.require(&f, "orchestrators", "at least one orchestrator") {
            Some(n) => self.orchestrators(n, "orchestrators"),
            None => Some(BTreeMap::new()),
        };
        // Controllers that decoded are kept even when others did not, so the plans are still
        // checked against them.
        let (controllers, controllers_ok) = match f.get("controllers") {
            Some(n) => self.controllers(n, "controllers", orchestrators.as_ref()),
            None => (BTreeMap::new(), true),
        };
        let plans = match f.get("plans") {
            Some(n) => self.plans(n, "plans", &controllers),
            None => Some(BTreeMap::new()),
        };
        let instance_ha = match f.get("instance_ha") {
            Some(n) => self.instance_ha(n, "instance_ha", &controllers),
            None => Some(BTreeMap::new()),
        };
        let controllers = controllers_ok.then_some(controllers);
        Some(Config {
            cluster: cluster?,
            sites: sites?,
            orchestrators: orchestrators?,
            controllers: controllers?,
            plans: plans?,
            instance_ha: instance_ha?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_print_as_written() {
        assert_eq!(secs(Duration::from_secs(45)), "45");
        assert_eq!(secs(Duration::from_millis(500)), "0.5");
    }
}
