//! API tokens and their roles.
//!
//! A caller sends `Authorization: Bearer <token>`. The token file holds, per token, its role,
//! a name (for the event log and logs: the token itself is never logged) and the SHA-256 of
//! the token in hex, so the file does not hold a usable credential:
//!
//! ```text
//! # role      name     sha256 of the token
//! viewer      grafana  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! operator    oncall   sha256:...
//! admin       alice    sha256:...
//! ```
//!
//! Roles are ordered: an operator may do what a viewer may, an admin what an operator may.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// What a token may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read everything.
    Viewer,
    /// Also: switchover, failover, confirm fenced, pause and resume, maintenance.
    Operator,
    /// Also: controllers, plans and secret references.
    Admin,
}

impl Access {
    /// The role as written in the token file.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Viewer => "viewer",
            Access::Operator => "operator",
            Access::Admin => "admin",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is calling: the token's name and role. A follower forwards it with the write it makes
/// (ADR 0024).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Caller {
    /// The token's name in the token file.
    pub name: String,
    pub access: Access,
}

impl Caller {
    /// The actor recorded in the event log: `token:NAME`.
    pub fn actor(&self) -> String {
        format!("token:{}", self.name)
    }
}

#[derive(Clone)]
struct Entry {
    name: String,
    access: Access,
    digest: [u8; 32],
}

/// The tokens the API accepts, by digest.
#[derive(Clone, Default)]
pub struct TokenStore {
    entries: Vec<Entry>,
}

impl fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Digests are not secrets, but there is no reason to print them either.
        f.debug_struct("TokenStore")
            .field(
                "tokens",
                &self
                    .entries
                    .iter()
                    .map(|e| (e.name.as_str(), e.access))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Invalid {
        file: String,
        line: usize,
        message: String,
    },
}

/// SHA-256 of a token, as stored in the token file.
pub fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The token file line for `token`: `ROLE NAME sha256:HEX`.
pub fn token_line(access: Access, name: &str, token: &str) -> String {
    format!("{access} {name} sha256:{}", hex::encode(digest(token)))
}

/// Compares two digests without an early exit. ring deprecated its own helper for outside
/// use, so the fold is here; the inputs are digests, so their length is not secret.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

impl TokenStore {
    /// Reads a token file.
    pub fn from_file(path: &Path) -> Result<Self, TokenFileError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text, &file)
    }

    /// Parses a token file's text. `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, TokenFileError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let invalid = |message: String| TokenFileError::Invalid {
                file: file.to_owned(),
                line: i + 1,
                message,
            };
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [role, name, hash] = parts.as_slice() else {
                return Err(invalid(format!(
                    "expected `ROLE NAME sha256:HEX`, found {} field(s)",
                    parts.len()
                )));
            };
            let access = match *role {
                "viewer" => Access::Viewer,
                "operator" => Access::Operator,
                "admin" => Access::Admin,
                other => {
                    return Err(invalid(format!(
                        "unknown role {other:?}; allowed: viewer, operator, admin"
                    )));
                }
            };
            // The value is never echoed: if someone pasted a token here, it stays out of logs.
            let hex_digest = hash.strip_prefix("sha256:").ok_or_else(|| {
                invalid("the third field must be `sha256:` and 64 hex digits".to_owned())
            })?;
            let bytes = hex::decode(hex_digest)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| {
                    invalid(
                        "the digest must be 64 hex digits (a SHA-256, not the token)".to_owned(),
                    )
                })?;
            if entries.iter().any(|e| e.name == *name) {
                return Err(invalid(format!("duplicate token name {name:?}")));
            }
            if entries.iter().any(|e| same_digest(&e.digest, &bytes)) {
                return Err(invalid(format!(
                    "token {name:?} has the same digest as another token"
                )));
            }
            entries.push(Entry {
                name: (*name).to_owned(),
                access,
                digest: bytes,
            });
        }
        Ok(Self { entries })
    }

    /// Adds a token (for tests and tools that make a store in code).
    pub fn with_token(mut self, access: Access, name: &str, token: &str) -> Self {
        self.entries.push(Entry {
            name: name.to_owned(),
            access,
            digest: digest(token),
        });
        self
    }

    /// Whom a presented token belongs to. Every entry is compared, match or not, so the time
    /// taken does not depend on which one matched.
    pub fn authenticate(&self, token: &str) -> Option<Caller> {
        let d = digest(token);
        let mut found = None;
        for e in &self.entries {
            if same_digest(&e.digest, &d) && found.is_none() {
                found = Some(Caller {
                    name: e.name.clone(),
                    access: e.access,
                });
            }
        }
        found
    }

    /// How many tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none (then every authenticated endpoint refuses every call).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_maps_digests_to_names_and_roles() {
        let text = format!(
            "# comment\n\n{}\n{}\n",
            token_line(Access::Viewer, "grafana", "t-view"),
            token_line(Access::Admin, "alice", "t-admin")
        );
        let store = TokenStore::parse(&text, "tokens").unwrap();
        assert_eq!(store.len(), 2);
        let c = store.authenticate("t-admin").unwrap();
        assert_eq!((c.name.as_str(), c.access), ("alice", Access::Admin));
        assert_eq!(store.authenticate("t-view").unwrap().access, Access::Viewer);
        assert_eq!(store.authenticate("t-other"), None);
        assert_eq!(store.authenticate(""), None);
    }

    #[test]
    fn a_bad_token_file_says_which_line_and_never_echoes_the_value() {
        let err = TokenStore::parse("viewer bob s3cr3t-token\n", "tokens").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("tokens:1:"), "{msg}");
        assert!(!msg.contains("s3cr3t"), "{msg}");
        let err = TokenStore::parse("root bob sha256:00\n", "t").unwrap_err();
        assert!(err.to_string().contains("unknown role \"root\""), "{err}");
        let dup = format!(
            "{}\n{}\n",
            token_line(Access::Viewer, "a", "x"),
            token_line(Access::Admin, "a", "y")
        );
        assert!(
            TokenStore::parse(&dup, "t")
                .unwrap_err()
                .to_string()
                .contains("duplicate")
        );
        let same = format!(
            "{}\n{}\n",
            token_line(Access::Viewer, "a", "x"),
            token_line(Access::Admin, "b", "x")
        );
        assert!(
            TokenStore::parse(&same, "t")
                .unwrap_err()
                .to_string()
                .contains("same digest")
        );
    }

    #[test]
    fn roles_are_ordered() {
        assert!(Access::Viewer < Access::Operator && Access::Operator < Access::Admin);
    }
}
