//! Credentials are never written in the file: every key that looks like one is refused.

use super::{Decoder, child, index};
use crate::config::keys::is_credential;
use crate::config::tree::{Node, Value};

pub(super) const INLINE_CREDENTIAL: &str = "inline credentials are refused: name a secret with \
    `secret: NAME` on the controller and store the credential under NAME in each \
    orchestrator's secret store";

/// Whether the mapping at `path` is keyed by names (a site may be called `pass`).
fn holds_names(path: &str) -> bool {
    matches!(path, "sites" | "orchestrators" | "controllers" | "plans")
        || (path.starts_with("plans.") && path.ends_with(".instances") && !path.contains('['))
}

impl Decoder {
    /// Reports every credential-looking key anywhere under `node`.
    pub(super) fn scan_credentials(&mut self, node: &Node, path: &str) {
        match &node.value {
            Value::Map(entries) => {
                for (k, v) in entries {
                    let Some(key) = k.value.as_text() else {
                        continue;
                    };
                    let p = child(path, &key);
                    self.visit(&p, k);
                    if is_credential(&key) && !holds_names(path) {
                        self.error(&p, INLINE_CREDENTIAL);
                    } else {
                        self.scan_credentials(v, &p);
                    }
                }
            }
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.scan_credentials(item, &index(path, i));
                }
            }
            _ => {}
        }
    }
}
