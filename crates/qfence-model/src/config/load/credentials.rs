//! Credentials are never written in the file: every key that looks like one is refused.

use super::{Decoder, child, index};
use crate::config::tree::{Node, Value};

/// Keys that hold a credential. Refused anywhere in the file: credentials are named by
/// `secret:` and resolved by each orchestrator from its own store.
const CREDENTIAL_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "api_key",
    "apikey",
    "api_token",
    "access_token",
    "auth_token",
    "bearer",
    "secret_value",
    "secret_key",
    "client_secret",
    "private_key",
    "access_key",
    "credential",
    "credentials",
    "community",
];

pub(super) fn is_credential_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace('-', "_");
    CREDENTIAL_KEYS.contains(&k.as_str())
}

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
                    if is_credential_key(&key) && !holds_names(path) {
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
