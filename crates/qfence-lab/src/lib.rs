//! qfence's lab: simulators that speak the real protocols, for tests, the demo and fault
//! injection.
//!
//! The model: each simulator is an in-process server started with [`fortios::start`] (and
//! siblings to come for Redfish and Proxmox VE) from an initial state. The returned handle
//! knows the server's address, lets a test read and change the simulated device's state, and
//! injects faults (latency, failed or silently ignored writes, shutdown). Simulators follow the
//! vendors' public API documents, not qfence's drivers: a driver passing against a simulator
//! must also be right against the real device wherever the documents are.

pub mod fortios;

use std::sync::Arc;

/// Errors of the lab crate.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// A certificate or TLS configuration could not be made.
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

/// A TLS server identity for a simulator: a self-signed certificate and its server config.
#[derive(Clone)]
pub struct LabTls {
    /// The certificate, DER-encoded (hash it to pin it).
    pub cert_der: Vec<u8>,
    /// The certificate, PEM-encoded (write it to a file to trust it as a CA).
    pub cert_pem: String,
    /// The rustls server configuration using it.
    pub server_config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for LabTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabTls")
            .field("cert_der_len", &self.cert_der.len())
            .finish_non_exhaustive()
    }
}

impl LabTls {
    /// A fresh self-signed certificate for `names` (DNS names or IP addresses).
    pub fn self_signed(names: &[&str]) -> Result<Self, LabError> {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let ck =
            rcgen::generate_simple_self_signed(names).map_err(|e| LabError::Tls(e.to_string()))?;
        let cert_der = ck.cert.der().to_vec();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| LabError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![cert_der.clone().into()], key)
            .map_err(|e| LabError::Tls(e.to_string()))?;
        Ok(Self {
            cert_der,
            cert_pem: ck.cert.pem(),
            server_config: Arc::new(server_config),
        })
    }
}
