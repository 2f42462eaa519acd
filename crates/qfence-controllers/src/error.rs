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

impl Error {
    /// This error as the build error of a driver ([`crate::driver::Build`]): the message says
    /// what is wrong without the controller, which the error names.
    pub(crate) fn into_build_error(
        self,
        id: &qfence_model::ControllerId,
    ) -> crate::driver::DriverError {
        let message = match self {
            Error::Build { reason, .. } => reason,
            Error::Tls { reason, .. } => format!("TLS: {reason}"),
            other => other.to_string(),
        };
        crate::driver::DriverError::new(
            crate::driver::ErrorKind::Unsupported,
            id,
            "build",
            message,
            false,
        )
    }
}
