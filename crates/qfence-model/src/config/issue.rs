//! What validation says about a configuration: issues, each with the path of the value it is
//! about, a message that names what was allowed, and a severity.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How bad an issue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The configuration cannot be used.
    Error,
    /// The configuration can be used, but probably does not do what was meant.
    Warning,
}

impl Severity {
    /// The severity as displayed.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Where: `plans.erp-db.instances.dc1[2].capability`. Empty for the document as a whole.
    pub path: String,
    /// What is wrong, with the value found and what was allowed.
    pub message: String,
    /// Error or warning.
    pub severity: Severity,
    /// The line the value is on (1-based), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl Issue {
    /// Whether this issue makes the configuration unusable.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The path as shown to a person: `(top level)` for the empty path.
    pub fn display_path(&self) -> &str {
        if self.path.is_empty() {
            "(top level)"
        } else {
            &self.path
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.display_path(), self.message)
    }
}

/// Sorts issues by path, comparing list indexes as numbers (`[2]` before `[10]`), then errors
/// before warnings.
pub(crate) fn sort(issues: &mut [Issue]) {
    issues.sort_by(|a, b| {
        natural_cmp(&a.path, &b.path)
            .then(a.severity.cmp(&b.severity))
            .then_with(|| a.message.cmp(&b.message))
    });
}

/// Compares strings with runs of digits compared by value.
fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|c| **c == b'0').count();
    &d[n.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(path: &str, severity: Severity) -> Issue {
        Issue {
            path: path.to_owned(),
            message: String::new(),
            severity,
            line: None,
        }
    }

    #[test]
    fn issues_sort_by_path_with_indexes_as_numbers_and_errors_first() {
        let mut v = vec![
            issue("plans.p.instances.dc1[10].role", Severity::Error),
            issue("plans.p.instances.dc1[2].role", Severity::Warning),
            issue("plans.p.instances.dc1[2].role", Severity::Error),
            issue("controllers.a", Severity::Error),
            issue("", Severity::Error),
        ];
        sort(&mut v);
        let order: Vec<_> = v.iter().map(|i| (i.path.as_str(), i.severity)).collect();
        assert_eq!(
            order,
            [
                ("", Severity::Error),
                ("controllers.a", Severity::Error),
                ("plans.p.instances.dc1[2].role", Severity::Error),
                ("plans.p.instances.dc1[2].role", Severity::Warning),
                ("plans.p.instances.dc1[10].role", Severity::Error),
            ]
        );
    }
}
