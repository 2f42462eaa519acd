//! Secrets, by reference.
//!
//! Configuration names a secret (`secret: bmc-dc1`); each orchestrator resolves that name from
//! its own stores, so the same configuration works at every site while the credential never
//! leaves the machines that need it. Stores are tried in order; the first that has the name
//! answers:
//!
//! - systemd credentials: `$CREDENTIALS_DIRECTORY/NAME` (`LoadCredential=NAME:PATH`), or
//!   `$CREDENTIALS_DIRECTORY/qfence_NAME` (a directory loaded as `LoadCredential=qfence:DIR`,
//!   as the Debian package's unit does);
//! - environment variables: `QFENCE_SECRET_NAME` (upper case, `-` and `.` become `_`);
//! - a file store: `DIR/NAME`, refused when the file grants any permission to group or others.
//!
//! A store that has the name but refuses it (a file readable by others) is an error, not a
//! reason to look further: a misconfigured store must be fixed, not silently bypassed.
//!
//! A [`Secret`] zeroizes its memory when dropped, prints as `[redacted]` and cannot be
//! serialized. Drivers read it with [`Secret::expose`] at the last moment (an HTTP header, a
//! fence agent's stdin), never into a log line, an error or a command line.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use qfence_model::ids::SecretRef;
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroize;

use crate::error::Error;

/// A secret value. Zeroized on drop, never printed.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a value (tests, and stores).
    pub fn new(value: String) -> Self {
        Self(SecretString::from(value))
    }

    /// The value. Use it at the last moment and do not keep copies.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl From<SecretString> for Secret {
    fn from(value: SecretString) -> Self {
        Self(value)
    }
}

impl From<Secret> for SecretString {
    fn from(value: Secret) -> Self {
        value.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How a store looks up environment variables. Injected so tests need not touch the process
/// environment.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// One place secrets come from.
#[derive(Clone)]
pub enum SecretSource {
    /// systemd credentials: files in this directory (normally `$CREDENTIALS_DIRECTORY`).
    Credentials(PathBuf),
    /// Environment variables `PREFIX` + the name in upper case with `-`/`.` as `_`.
    Env { prefix: String, lookup: EnvLookup },
    /// Files in this directory, one per secret, mode 0600 or stricter.
    Files(PathBuf),
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Credentials(d) => write!(f, "Credentials({})", d.display()),
            SecretSource::Env { prefix, .. } => write!(f, "Env({prefix}*)"),
            SecretSource::Files(d) => write!(f, "Files({})", d.display()),
        }
    }
}

/// The environment variable name for a secret: `QFENCE_SECRET_BMC_DC1` for `bmc-dc1`.
pub fn env_name(prefix: &str, name: &str) -> String {
    let mut s = String::from(prefix);
    s.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

/// An orchestrator's secret stores, tried in order.
#[derive(Debug, Clone, Default)]
pub struct SecretStore {
    sources: Vec<SecretSource>,
}

/// What systemd prefixes to each file of a directory loaded as `LoadCredential=qfence:DIR`.
pub const CREDENTIAL_PREFIX: &str = "qfence_";

/// The default prefix of secret environment variables.
pub const ENV_PREFIX: &str = "QFENCE_SECRET_";

impl SecretStore {
    /// A store over these sources, tried in order.
    pub fn new(sources: Vec<SecretSource>) -> Self {
        Self { sources }
    }

    /// The usual stores of a qfence process: systemd credentials when
    /// `$CREDENTIALS_DIRECTORY` is set, then `QFENCE_SECRET_*` variables, then `files_dir`
    /// when given.
    pub fn from_process(files_dir: Option<PathBuf>) -> Self {
        let mut sources = Vec::new();
        if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") {
            sources.push(SecretSource::Credentials(PathBuf::from(dir)));
        }
        sources.push(SecretSource::Env {
            prefix: ENV_PREFIX.to_owned(),
            lookup: Arc::new(|k| std::env::var(k).ok()),
        });
        if let Some(dir) = files_dir {
            sources.push(SecretSource::Files(dir));
        }
        Self { sources }
    }

    /// Resolves a reference. The error says where it looked, never what it found.
    pub fn resolve(&self, name: &SecretRef) -> Result<Secret, Error> {
        let mut looked = Vec::new();
        for source in &self.sources {
            match source {
                SecretSource::Credentials(dir) => {
                    // `LoadCredential=ID:NAME` gives NAME; a whole directory loaded as
                    // `LoadCredential=qfence:DIR` (the packaged unit) gives qfence_NAME.
                    for file in [name.to_string(), format!("{CREDENTIAL_PREFIX}{name}")] {
                        let path = dir.join(file);
                        if let Some(secret) = read_file(name.as_str(), &path)? {
                            return Ok(secret);
                        }
                        looked.push(path.display().to_string());
                    }
                }
                SecretSource::Files(dir) => {
                    let path = dir.join(name.as_str());
                    if let Some(secret) = read_file(name.as_str(), &path)? {
                        return Ok(secret);
                    }
                    looked.push(path.display().to_string());
                }
                SecretSource::Env { prefix, lookup } => {
                    let var = env_name(prefix, name.as_str());
                    if let Some(mut v) = lookup(&var) {
                        let secret = Secret::new(trim_newline(&v));
                        v.zeroize();
                        return Ok(secret);
                    }
                    looked.push(format!("${var}"));
                }
            }
        }
        Err(Error::SecretNotFound {
            name: name.to_string(),
            looked_in: if looked.is_empty() {
                "no secret stores are configured".to_owned()
            } else {
                looked.join(", ")
            },
        })
    }
}

/// Takes the value without a trailing newline (files written with `echo` end in one).
fn trim_newline(v: &str) -> String {
    let end = v.trim_end_matches(['\n', '\r']).len();
    v[..end].to_owned()
}

fn read_file(name: &str, path: &Path) -> Result<Option<Secret>, Error> {
    let refused = |reason: String| Error::SecretRefused {
        name: name.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(refused(format!("cannot open: {e}"))),
    };
    let meta = file
        .metadata()
        .map_err(|e| refused(format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(refused("is not a regular file".to_owned()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refused(format!(
            "is accessible by group or others (mode {mode:04o}); run chmod 600 on it"
        )));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        bytes.zeroize();
        return Err(refused(format!("cannot read: {e}")));
    }
    match String::from_utf8(bytes) {
        Ok(mut s) => {
            let secret = Secret::new(trim_newline(&s));
            s.zeroize();
            Ok(Some(secret))
        }
        Err(e) => {
            e.into_bytes().zeroize();
            Err(refused("is not UTF-8".to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn name(s: &str) -> SecretRef {
        SecretRef::new(s).unwrap()
    }

    fn write(dir: &Path, file: &str, content: &str, mode: u32) {
        let p = dir.join(file);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn env(vars: &[(&str, &str)]) -> SecretSource {
        let map: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        SecretSource::Env {
            prefix: ENV_PREFIX.to_owned(),
            lookup: Arc::new(move |k| map.get(k).cloned()),
        }
    }

    #[test]
    fn a_private_file_resolves_without_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bmc-dc1", "s3cret\n", 0o600);
        let store = SecretStore::new(vec![SecretSource::Files(dir.path().into())]);
        assert_eq!(store.resolve(&name("bmc-dc1")).unwrap().expose(), "s3cret");
    }

    #[test]
    fn a_file_readable_by_group_or_others_is_refused_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o640, 0o604, 0o620] {
            write(dir.path(), "bmc", "s3cret", mode);
            let store = SecretStore::new(vec![
                SecretSource::Files(dir.path().into()),
                env(&[("QFENCE_SECRET_BMC", "from-env")]),
            ]);
            let err = store.resolve(&name("bmc")).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::SecretRefused { .. }), "{msg}");
            assert!(msg.contains("chmod 600"), "{msg}");
            assert!(!msg.contains("s3cret"), "{msg}");
        }
    }

    #[test]
    fn environment_names_are_upper_case_with_underscores() {
        assert_eq!(env_name(ENV_PREFIX, "bmc-dc1.x"), "QFENCE_SECRET_BMC_DC1_X");
        let store = SecretStore::new(vec![env(&[("QFENCE_SECRET_BMC_DC1", "pw")])]);
        assert_eq!(store.resolve(&name("bmc-dc1")).unwrap().expose(), "pw");
    }

    #[test]
    fn systemd_credentials_come_first_when_configured() {
        let creds = tempfile::tempdir().unwrap();
        write(creds.path(), "bmc", "from-creds", 0o400);
        let store = SecretStore::new(vec![
            SecretSource::Credentials(creds.path().into()),
            env(&[("QFENCE_SECRET_BMC", "from-env")]),
        ]);
        assert_eq!(store.resolve(&name("bmc")).unwrap().expose(), "from-creds");
    }

    /// The packaged unit loads /etc/qfence/credentials whole (`LoadCredential=qfence:DIR`):
    /// systemd names each file qfence_FILE, mode 0400.
    #[test]
    fn a_credential_from_a_loaded_directory_is_found_under_its_prefixed_name() {
        let creds = tempfile::tempdir().unwrap();
        write(creds.path(), "qfence_bmc-dc1", "from-dir\n", 0o400);
        let store = SecretStore::new(vec![
            SecretSource::Credentials(creds.path().into()),
            env(&[("QFENCE_SECRET_BMC_DC1", "from-env")]),
        ]);
        assert_eq!(
            store.resolve(&name("bmc-dc1")).unwrap().expose(),
            "from-dir"
        );
        // The credential of the exact name wins over the prefixed one.
        write(creds.path(), "bmc-dc1", "exact", 0o400);
        assert_eq!(store.resolve(&name("bmc-dc1")).unwrap().expose(), "exact");
    }

    #[test]
    fn a_missing_secret_says_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(vec![env(&[]), SecretSource::Files(dir.path().into())]);
        let msg = store.resolve(&name("nope")).unwrap_err().to_string();
        assert!(msg.contains("$QFENCE_SECRET_NOPE"), "{msg}");
        assert!(
            msg.contains(&dir.path().join("nope").display().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("hunter2".into());
        assert_eq!(format!("{s:?}"), "[redacted]");
    }
}
