//! The crate's error for everything that is not a driver call: building a driver, resolving a
//! secret, setting up TLS trust. Driver calls fail with [`crate::DriverError`], which carries
//! the kind and the "state unknown" flag the decision core needs.

use std::path::PathBuf;

/// Why a driver could not be built or its secret or TLS trust set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No store holds the secret.
    #[error("secret {name:?} was not found (looked in: {looked_in})")]
    SecretNotFound { name: String, looked_in: String },
    /// A store holds the secret but refuses to hand it out (permissions, encoding).
    #[error("secret {name:?} in {path}: {reason}")]
    SecretRefused {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// The controller's TLS trust cannot be set up.
    #[error("controller {controller}: TLS: {reason}")]
    Tls { controller: String, reason: String },
    /// The controller's configuration cannot be turned into a driver.
    #[error("controller {controller}: {reason}")]
    Build { controller: String, reason: String },
}
